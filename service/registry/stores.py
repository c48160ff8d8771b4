"""The blob store the settings name (boto3 is imported only when a bucket is used)."""

from __future__ import annotations

from service.config import Settings
from service.registry.blobs import BlobStore, LocalBlobStore


def make_blob_store(settings: Settings) -> BlobStore:
    """The bucket of ``RETARGET_BLOB_URL`` (s3://), or the local blob folder."""
    if settings.blob_url:
        from service.registry.s3_blobs import S3BlobStore

        return S3BlobStore.from_settings(settings)
    return LocalBlobStore(settings.resolved_blob_dir)
