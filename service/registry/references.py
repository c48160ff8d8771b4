"""Weights named by reference (a model's ``weights_uri``) instead of uploaded.

``s3://bucket/key`` in a bucket of ``RETARGET_REFERENCE_BUCKETS``, read with the standard
AWS credentials, or ``file:///path`` under ``RETARGET_REFERENCE_ROOT``. The bytes are read
(hashed and checked as an upload's); when the blob store is a bucket the same credentials
can read, the object is then copied server-side rather than uploaded again (``If-Match``
the ETag that was read, so a changed object is refused rather than stored under the
wrong hash). Anything else is a 422 before a byte is stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from service.config import Settings
from service.errors import InvalidInput
from service.formats.streams import iter_file
from service.registry.blobs import BlobStore

#: read size when streaming a referenced object
CHUNK = 4 * 1024 * 1024


class Reference:
    """The chunks of a referenced file, and where a store may copy it from."""

    def __init__(self, chunks: Iterator[bytes], uri: str, copy_source: Any = None) -> None:
        self._chunks = chunks
        self.uri = uri
        self.copy_source = copy_source

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._chunks
        except OSError as exc:
            raise InvalidInput(f"weights_uri {self.uri!r} could not be read: {exc}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith(("botocore", "boto3")):
                raise InvalidInput(f"weights_uri {self.uri!r} could not be read: {exc}") from exc
            raise


def _has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (C0, DEL or C1): a NUL makes the OS
    refuse the path, and none belongs in a file or object name the service reads."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def open_reference(uri: str, settings: Settings, blobs: BlobStore) -> Reference:
    if _has_control(uri) or _has_control(unquote(uri)):
        raise InvalidInput(
            f"weights_uri {uri!r} holds a control character (NUL, newline, ...), "
            "plain or percent-encoded"
        )
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return _open_file(uri, parsed.netloc, unquote(parsed.path), settings)
    if parsed.scheme == "s3":
        return _open_object(uri, parsed.netloc, unquote(parsed.path.lstrip("/")), settings, blobs)
    raise InvalidInput(f"weights_uri must be s3:// or file://, not {uri!r}")


def _open_file(uri: str, host: str, path: str, settings: Settings) -> Reference:
    if settings.reference_root is None:
        raise InvalidInput("weights_uri: file:// references are off (RETARGET_REFERENCE_ROOT)")
    if host not in ("", "localhost"):
        raise InvalidInput(f"weights_uri {uri!r}: a file:// URI names a local path")
    root = settings.reference_root.resolve()
    target = Path(path).resolve()  # symbolic links followed: where the bytes really are
    if not target.is_relative_to(root):
        raise InvalidInput(f"weights_uri {uri!r} is outside the allowed folder")
    if not target.is_file():
        raise InvalidInput(f"weights_uri {uri!r}: no such file")

    def chunks() -> Iterator[bytes]:  # opened when read (Reference turns OSError into 422)
        with target.open("rb") as fh:
            yield from iter_file(fh, CHUNK)

    return Reference(chunks(), uri)


def _open_object(
    uri: str, bucket: str, key: str, settings: Settings, blobs: BlobStore
) -> Reference:
    allowed = {b.strip() for b in settings.reference_buckets.split(",") if b.strip()}
    if bucket not in allowed:
        raise InvalidInput(
            f"weights_uri {uri!r}: bucket {bucket!r} is not one the service may read "
            "(RETARGET_REFERENCE_BUCKETS)"
        )
    if not key or key.endswith("/"):
        raise InvalidInput(f"weights_uri {uri!r} names no object")
    from botocore.exceptions import BotoCoreError, ClientError

    from service.registry.s3_blobs import S3BlobStore
    from service.registry.s3_io import CopySource, s3_client

    client = (
        blobs.client
        if isinstance(blobs, S3BlobStore)
        else s3_client(settings.blob_s3_addressing_style)
    )
    try:
        etag = str(client.head_object(Bucket=bucket, Key=key)["ETag"])
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        why = "no such object" if status == 404 else exc.response.get("Error", {}).get("Code")
        raise InvalidInput(f"weights_uri {uri!r} could not be read: {why}") from exc
    except BotoCoreError as exc:
        raise InvalidInput(f"weights_uri {uri!r} could not be read: {exc}") from exc

    def chunks() -> Iterator[bytes]:  # the bytes of the version whose ETag was read
        body = client.get_object(Bucket=bucket, Key=key, IfMatch=etag)["Body"]
        try:
            yield from body.iter_chunks(CHUNK)
        finally:
            body.close()

    return Reference(chunks(), uri, CopySource(bucket, key, etag))
