"""A small HTTP client for the demo, on the standard library: the demo talks to the
service only through its public API, as any caller would."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status}: {problem.get('detail') or problem}")
        self.status = status
        self.problem = problem


class Client:
    def __init__(self, base_url: str, key: str, timeout: float = 600.0) -> None:
        self.base = base_url.rstrip("/")
        self.key = key
        self.timeout = timeout

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.base + path, data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.key}")
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def json(self, method: str, path: str, payload: Any = None) -> Any:
        """The JSON answer; waits out 202 (profiles being computed); raises ApiError."""
        body = None if payload is None else json.dumps(payload).encode()
        for _ in range(600):
            status, headers, data = self.request(
                method, path, body, "application/json" if body is not None else None
            )
            if status == 202:
                time.sleep(float(headers.get("Retry-After", "1")))
                continue
            parsed = json.loads(data) if data else None
            if status >= 400:
                raise ApiError(status, parsed or {})
            return parsed
        raise ApiError(504, {"detail": f"{path} still pending"})

    def upload(self, path: str, files: dict[str, tuple[str, bytes]], fields: dict[str, str]) -> Any:
        boundary = uuid.uuid4().hex
        parts: list[bytes] = []
        for name, value in fields.items():
            parts.append(
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
                + value.encode()
                + b"\r\n"
            )
        for name, (filename, content) in files.items():
            parts.append(
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
                + content
                + b"\r\n"
            )
        parts.append(f"--{boundary}--\r\n".encode())
        status, _, data = self.request(
            "POST", path, b"".join(parts), f"multipart/form-data; boundary={boundary}"
        )
        parsed = json.loads(data) if data else None
        if status >= 400:
            raise ApiError(status, parsed or {})
        return parsed

    def put_bytes(self, path: str, content: bytes) -> Any:
        status, _, data = self.request("PUT", path, content, "application/octet-stream")
        parsed = json.loads(data) if data else None
        if status >= 400:
            raise ApiError(status, parsed or {})
        return parsed

    def download(self, path: str) -> bytes:
        status, _, data = self.request("GET", path)
        if status != 200:
            raise ApiError(status, json.loads(data) if data else {})
        return data
