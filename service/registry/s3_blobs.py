"""Blobs in S3-compatible object storage (AWS S3, GCS's S3 API, SeaweedFS, Ceph, MinIO, R2).

``RETARGET_BLOB_URL=s3://bucket/prefix`` selects it; credentials, region and endpoint come
from the standard AWS variables and config files (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``...).

Objects are named ``<prefix>/ab/cd/<sha256>`` as in the local folder. Uploads are staged
on local disk (the bytes are hashed and parsed before they get a name), then sent with
``If-None-Match: *``: concurrent identical uploads store one object and the loser learns
it lost (412). A server that refuses the condition gets a HEAD then a PUT, which is just
as sound: a key names its bytes, so an overwrite writes the same bytes. Every request
carries its SHA-256 (the whole object's for a single PUT, which is the key itself; each
part's for a multipart upload) so the server refuses damaged bytes, and the stored size
is checked afterwards. Code that needs a file (merges, validation scoring) gets a cached
copy whose hash is checked on download.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import quote

from botocore.exceptions import BotoCoreError, ClientError

from service.config import Settings
from service.errors import InvalidInput, StorageError
from service.registry.blobs import LocalBlobStore, StagedBlob, _check_sha
from service.registry.read_ahead import read_ahead
from service.registry.s3_io import (
    EXISTS,
    NO_CONDITIONAL,
    CopySource,
    error_code,
    http_status,
    parse_s3_url,
    s3_client,
    send,
)

#: read size of streamed downloads
STREAM_CHUNK = 16 * 1024 * 1024
#: parts fetched ahead of the one being sent by a streamed download
READ_AHEAD = 2
#: cached copies used more recently than this are never removed (a merge may hold them)
CACHE_GRACE_S = 3600


@dataclass
class RemoteStaged(StagedBlob):
    copy_source: CopySource | None = field(default=None)


class S3BlobStore:
    """Content-addressed blobs in a bucket; a local folder for staging and cached copies."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        cache_dir: Path,
        *,
        client: Any = None,
        cache_max_bytes: int = 20 * 1024**3,
        presign_expiry_s: int = 900,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client if client is not None else s3_client()
        self.cache = LocalBlobStore(cache_dir)
        self.staging_dir = self.cache.staging_dir
        self.cache_max_bytes = cache_max_bytes
        self.presign_expiry_s = presign_expiry_s
        self.conditional_writes = True  # False once the server refuses If-None-Match

    @classmethod
    def from_settings(cls, settings: Settings) -> S3BlobStore:
        assert settings.blob_url
        bucket, prefix = parse_s3_url(settings.blob_url)
        return cls(
            bucket,
            prefix,
            settings.resolved_blob_cache_dir,
            client=s3_client(settings.blob_s3_addressing_style),
            cache_max_bytes=settings.blob_cache_max_bytes,
            presign_expiry_s=settings.presign_expiry_s,
        )

    def key(self, sha256: str) -> str:
        _check_sha(sha256)
        name = f"{sha256[:2]}/{sha256[2:4]}/{sha256}"
        return f"{self.prefix}/{name}" if self.prefix else name

    # writing -----------------------------------------------------------------

    def stage(
        self, chunks: Iterable[bytes | memoryview], *, max_bytes: int | None = None
    ) -> StagedBlob:
        """Write and hash the bytes on local disk (the cache folder's .tmp)."""
        staged = self.cache.stage(chunks, max_bytes=max_bytes)
        source = getattr(chunks, "copy_source", None)
        return RemoteStaged(staged.path, staged.sha256, staged.size, copy_source=source)

    def discard(self, staged: StagedBlob) -> None:
        staged.path.unlink(missing_ok=True)

    def promote(self, staged: StagedBlob) -> bool:
        """Store the staged bytes under their key; False when the object was there already.
        The local file is removed either way."""
        try:
            source = getattr(staged, "copy_source", None)
            copied = self._copy(staged, source) if source is not None else None
            return self._upload(staged) if copied is None else copied
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"could not store blob {staged.sha256}: {exc}") from exc
        finally:
            staged.path.unlink(missing_ok=True)

    def _copy(self, staged: StagedBlob, source: CopySource) -> bool | None:
        """Server-side copy of the object the bytes were read from (True: copied, False:
        stored already); None when this store cannot read it (then the bytes are uploaded)."""
        key = self.key(staged.sha256)
        if self._head(key) is not None:
            return False
        try:
            self.client.copy(
                {"Bucket": source.bucket, "Key": source.key},
                self.bucket,
                key,
                ExtraArgs={"CopySourceIfMatch": source.etag},
            )
        except ClientError as exc:
            if error_code(exc) in {"AccessDenied", "NoSuchBucket", "NotImplemented"}:
                return None
            if error_code(exc) in EXISTS or http_status(exc) == 412:
                raise InvalidInput(  # the copy would not be the bytes that were checked
                    f"weights_uri: s3://{source.bucket}/{source.key} changed while it was read"
                ) from exc
            raise
        self._verify_size(key, staged)
        return True

    def _upload(self, staged: StagedBlob) -> bool:
        key = self.key(staged.sha256)
        if not self.conditional_writes and self._head(key) is not None:
            return False
        try:
            send(self.client, self.bucket, key, staged, conditional=self.conditional_writes)
        except ClientError as exc:
            if error_code(exc) in EXISTS or http_status(exc) == 412:
                return False
            if not self.conditional_writes or (
                error_code(exc) not in NO_CONDITIONAL and http_status(exc) != 501
            ):
                raise
            self.conditional_writes = False
            return self._upload(staged)
        self._verify_size(key, staged)
        return True

    def _verify_size(self, key: str, staged: StagedBlob) -> None:
        head = self._head(key)
        if head is None or int(head["ContentLength"]) != staged.size:
            raise StorageError(
                f"blob {staged.sha256} was not stored whole "
                f"({None if head is None else head['ContentLength']} of {staged.size} bytes)"
            )

    # reading -----------------------------------------------------------------

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self.client.head_object(Bucket=self.bucket, Key=key))
        except ClientError as exc:
            if http_status(exc) == 404 or error_code(exc) in {"404", "NoSuchKey", "NotFound"}:
                return None
            raise StorageError(f"the blob store did not answer: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"the blob store did not answer: {exc}") from exc

    def exists(self, sha256: str) -> bool:
        return self._head(self.key(sha256)) is not None

    def size(self, sha256: str) -> int:
        head = self._head(self.key(sha256))
        if head is None:
            raise StorageError(f"blob {sha256} is missing from the store")
        return int(head["ContentLength"])

    def open(self, sha256: str) -> BinaryIO:
        """The blob as a local, seekable file (the cached copy); ``stream`` reads the
        object without one."""
        try:
            return self.local_path(sha256).open("rb")
        except FileNotFoundError as exc:  # removed from the cache by another process
            raise StorageError(f"the cached copy of blob {sha256} went away") from exc

    def _get(self, sha256: str, start: int = 0, end: int | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key(sha256)}
        if start or end is not None:
            args["Range"] = f"bytes={start}-{'' if end is None else end}"
        try:
            return cast(dict[str, Any], self.client.get_object(**args))
        except ClientError as exc:
            if error_code(exc) in {"NoSuchKey", "404"}:
                raise StorageError(f"blob {sha256} is missing from the store") from exc
            raise StorageError(f"the blob store did not answer: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"the blob store did not answer: {exc}") from exc

    def stream(self, sha256: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Bytes ``start`` to ``end`` (inclusive; None: to the end) of a blob, streamed."""
        body = self._get(sha256, start, end)["Body"]
        try:
            yield from read_ahead(body.iter_chunks(STREAM_CHUNK), READ_AHEAD)
        finally:
            body.close()

    def presign(self, sha256: str, filename: str) -> str:
        """A URL anyone holding it may GET the blob from until it expires."""
        try:
            url = self.client.generate_presigned_url(
                "get_object",
                Params={
                    "Bucket": self.bucket,
                    "Key": self.key(sha256),
                    "ResponseContentType": "application/octet-stream",
                    "ResponseContentDisposition": f"attachment; filename*=UTF-8''{quote(filename)}",
                },
                ExpiresIn=self.presign_expiry_s,
            )
        except BotoCoreError as exc:  # no credentials to sign with
            raise StorageError(f"could not presign blob {sha256}: {exc}") from exc
        return str(url)

    def local_path(self, sha256: str) -> Path:
        """A local copy (downloaded once into the cache, its hash checked)."""
        path = self.cache.local_path(sha256)
        if path.is_file():
            os.utime(path)  # used now: the cache keeps it
            return path
        body = self._get(sha256)["Body"]
        digest = hashlib.sha256()
        fd, name = tempfile.mkstemp(dir=self.cache.tmp, prefix=f"stage-{os.getpid()}-")
        try:
            with os.fdopen(fd, "wb") as out:
                for block in body.iter_chunks(STREAM_CHUNK):
                    digest.update(block)
                    out.write(block)
            if digest.hexdigest() != sha256:
                raise StorageError(f"blob {sha256} in the store does not match its name")
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(name, path)
        except OSError as exc:
            raise StorageError(f"could not cache blob {sha256}: {exc}") from exc
        finally:
            body.close()
            Path(name).unlink(missing_ok=True)
        self.trim_cache()
        return path

    def trim_cache(self) -> list[Path]:
        """Remove cached copies, least recently used first, until the cache fits its
        limit; copies used within ``CACHE_GRACE_S`` stay. Safe to run in several threads
        and processes at once (a copy another one removed is skipped)."""
        files = []
        for path in self.cache.root.glob("??/??/*"):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        files.sort()
        total = sum(size for _, size, _ in files)
        removed = []
        now = time.time()
        for mtime, size, path in files:
            if total <= self.cache_max_bytes or now - mtime < CACHE_GRACE_S:
                break
            total -= size
            path.unlink(missing_ok=True)
            removed.append(path)
        return removed

    def delete(self, sha256: str) -> None:
        self.cache.delete(sha256)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key(sha256))
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"could not delete blob {sha256}: {exc}") from exc

    def shas(self) -> Iterator[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else ""
        )
        for page in pages:
            for item in page.get("Contents", []):
                name = item["Key"].rsplit("/", 1)[-1]
                if len(name) == 64 and all(c in "0123456789abcdef" for c in name):
                    yield name

    def ready(self) -> bool:
        """The bucket answers and the staging folder can be written."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except (ClientError, BotoCoreError):
            return False
        return self.cache.ready()

    def free_bytes(self) -> int | None:
        """Free space on the staging disk (uploads and merges are written there first)."""
        try:
            return shutil.disk_usage(self.cache.tmp).free
        except OSError:
            return None
