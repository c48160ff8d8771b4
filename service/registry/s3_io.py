"""S3 plumbing of the bucket blob store: the client from the standard AWS configuration,
error codes, and a staged file's upload (one PUT, or parts sent in parallel), each
request carrying the SHA-256 of its bytes so the server refuses damaged ones."""

from __future__ import annotations

import base64
import contextlib
import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from service.errors import InvalidInput
from service.registry.blobs import StagedBlob

#: above this size an upload is multipart; also the part size
PART_BYTES = 32 * 1024 * 1024
#: parts sent at once by one upload
PART_THREADS = 4
#: error codes of servers that do not implement conditional writes
NO_CONDITIONAL = {"NotImplemented", "InvalidArgument", "InvalidRequest", "Unsupported"}
EXISTS = {"PreconditionFailed", "ConditionalRequestConflict"}


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ("bucket", "some/prefix")."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise InvalidInput(f"not an s3:// URL with a bucket: {url!r}")
    return parsed.netloc, parsed.path.strip("/")


def s3_client(addressing_style: str = "auto") -> Any:
    """A client configured from the standard AWS variables and config files."""
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": addressing_style},
        retries={"mode": "standard", "max_attempts": 5},
        max_pool_connections=32,
    )
    return boto3.session.Session().client("s3", config=config)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


@dataclass
class CopySource:
    """An object the staged bytes were read from (``If-Match`` its ETag): when the store
    can read that bucket, promotion copies it server-side instead of uploading."""

    bucket: str
    key: str
    etag: str


def send(client: Any, bucket: str, key: str, staged: StagedBlob, *, conditional: bool) -> None:
    """Upload a staged file under ``key`` (``If-None-Match: *`` when ``conditional``);
    a multipart upload that fails is aborted."""
    extra: dict[str, Any] = {"IfNoneMatch": "*"} if conditional else {}
    meta = {"Metadata": {"sha256": staged.sha256}}
    if staged.size <= PART_BYTES:
        with staged.path.open("rb") as fh:
            client.put_object(
                Bucket=bucket,
                Key=key,
                Body=fh,
                ContentLength=staged.size,
                ChecksumSHA256=b64(bytes.fromhex(staged.sha256)),
                **meta,
                **extra,
            )
        return
    upload = client.create_multipart_upload(
        Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256", **meta
    )["UploadId"]
    try:
        count = -(-staged.size // PART_BYTES)
        with ThreadPoolExecutor(PART_THREADS) as pool:
            parts = list(
                pool.map(
                    lambda n: _part(client, bucket, staged.path, key, upload, n),
                    range(1, count + 1),
                )
            )
        client.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload,
            MultipartUpload={"Parts": parts},
            **extra,
        )
    except BaseException:
        # on failure the bucket's lifecycle rule for incomplete uploads cleans up
        with contextlib.suppress(ClientError, BotoCoreError):
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
        raise


def _part(
    client: Any, bucket: str, path: Path, key: str, upload: str, number: int
) -> dict[str, Any]:
    with path.open("rb") as fh:
        fh.seek((number - 1) * PART_BYTES)
        data = fh.read(PART_BYTES)
    checksum = b64(hashlib.sha256(data).digest())
    answer = client.upload_part(
        Bucket=bucket,
        Key=key,
        UploadId=upload,
        PartNumber=number,
        Body=data,
        ChecksumSHA256=checksum,
    )
    return {"PartNumber": number, "ETag": answer["ETag"], "ChecksumSHA256": checksum}
