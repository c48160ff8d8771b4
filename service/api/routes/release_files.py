"""A release's files, one by one or as a streamed tar, for a release or a deployment.

A serving stack (transformers, vLLM, TGI, KServe) loads a folder: ``/files`` lists
it, ``/files/{path}`` serves one file (ETag = its sha256, If-None-Match, Range),
``/archive`` streams the whole folder as an uncompressed tar (ETag: the release's
manifest), never holding a file in memory. A single-file release is the folder
``model.safetensors``.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from service.api.blob_responses import WEIGHTS_RESPONSES, blob_response, etag_for, not_modified
from service.api.deps import BlobsDep, SessionDep, require
from service.api.schemas import BundleFile, Problem, ReleaseFilesPublic
from service.deployments import policies as deployment_service
from service.errors import NotFound, StorageError
from service.registry import repository
from service.registry.blobs import BlobStore
from service.registry.models import Release
from service.releases.pending import ready

router = APIRouter(tags=["releases"])

TAR = "application/x-tar"
ARCHIVE_CHUNK = 4 * 1024 * 1024
FilePath = Annotated[str, Path(max_length=512)]


def release_files(release: Release) -> list[dict[str, Any]]:
    ready(release)
    if release.files is not None:
        return list(release.files)
    return [{"path": "model.safetensors", "size": release.size_bytes, "sha256": release.sha256}]


def _deployment_release(session: Session, name: str) -> Release:
    dep = deployment_service.get_deployment(session=session, name=name)
    if dep.current_release_id is None:
        raise NotFound(f"deployment {name!r} has no release yet")
    return repository.get_release(session=session, release_id=dep.current_release_id)


def _listing(release: Release) -> ReleaseFilesPublic:
    return ReleaseFilesPublic(
        release_id=release.id,
        kind=release.kind,
        files=[BundleFile(**f) for f in release_files(release)],
    )


def _one_file(request: Request, blobs: BlobStore, release: Release, path: str) -> Response:
    for f in release_files(release):
        if f["path"] == path:
            return blob_response(request, blobs, f["sha256"], path.rsplit("/", 1)[-1])
    raise NotFound(f"release {release.id!r} has no file {path!r}")


def _tar_members(release: Release) -> list[tuple[bytes, str, int]]:
    mtime = int(release.created_at.timestamp())
    members = []
    for f in sorted(release_files(release), key=lambda f: f["path"]):
        info = tarfile.TarInfo(f["path"])
        info.size, info.mtime, info.mode = int(f["size"]), mtime, 0o644
        members.append((info.tobuf(format=tarfile.PAX_FORMAT), f["sha256"], int(f["size"])))
    return members


def _archive(request: Request, blobs: BlobStore, release: Release) -> Response:
    etag = etag_for(release.sha256 + "-tar")
    headers = {"ETag": etag, "Cache-Control": "private, max-age=0, must-revalidate"}
    if not_modified(request, release.sha256 + "-tar"):
        return Response(status_code=304, headers=headers)
    members = _tar_members(release)
    for _, sha, _ in members:
        if not blobs.exists(sha):
            raise StorageError(f"blob {sha} of release {release.id!r} is missing from the store")
    length = sum(len(h) + size + (-size % 512) for h, _, size in members) + 1024

    def body() -> Iterator[bytes]:
        for header, sha, size in members:
            yield header
            with blobs.open(sha) as fh:
                while block := fh.read(ARCHIVE_CHUNK):
                    yield block
            yield b"\0" * (-size % 512)
        yield b"\0" * 1024  # end of archive: two zero blocks

    headers["Content-Length"] = str(length)
    headers["Content-Disposition"] = f'attachment; filename="{release.id}.tar"'
    return StreamingResponse(body(), media_type=TAR, headers=headers)


FILE_RESPONSES: dict[int | str, dict[str, Any]] = {**WEIGHTS_RESPONSES, 404: {"model": Problem}}
ARCHIVE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {TAR: {}}, "description": "the release's files as a tar"},
    304: {"description": "Not modified"},
    404: {"model": Problem},
}


@router.get(
    "/v1/releases/{release_id}/files",
    operation_id="releases_files",
    dependencies=[require("read")],
    response_model=ReleaseFilesPublic,
    responses={404: {"model": Problem}},
)
def list_release_files(release_id: str, session: SessionDep) -> ReleaseFilesPublic:
    """The release's files (path, size, sha256), as a serving stack lays them out."""
    return _listing(repository.get_release(session=session, release_id=release_id))


@router.get(
    "/v1/releases/{release_id}/files/{path:path}",
    operation_id="releases_file",
    dependencies=[require("read")],
    response_class=Response,
    responses=FILE_RESPONSES,
)
def get_release_file(
    release_id: str, path: FilePath, request: Request, session: SessionDep, blobs: BlobsDep
) -> Response:
    """One file of the release: ETag = its sha256, If-None-Match (304) and Range."""
    release = repository.get_release(session=session, release_id=release_id)
    return _one_file(request, blobs, release, path)


@router.get(
    "/v1/releases/{release_id}/archive",
    operation_id="releases_archive",
    dependencies=[require("read")],
    response_class=Response,
    responses=ARCHIVE_RESPONSES,
)
def get_release_archive(
    release_id: str, request: Request, session: SessionDep, blobs: BlobsDep
) -> Response:
    """Every file of the release as one streamed, uncompressed tar (extract into the
    folder a serving stack loads)."""
    release = repository.get_release(session=session, release_id=release_id)
    return _archive(request, blobs, release)


@router.get(
    "/v1/deployments/{name}/files",
    operation_id="deployments_files",
    dependencies=[require("read")],
    response_model=ReleaseFilesPublic,
    responses={404: {"model": Problem}},
    tags=["deployments"],
)
def list_deployment_files(name: str, session: SessionDep) -> ReleaseFilesPublic:
    """The files of the deployment's current release."""
    return _listing(_deployment_release(session, name))


@router.get(
    "/v1/deployments/{name}/files/{path:path}",
    operation_id="deployments_file",
    dependencies=[require("read")],
    response_class=Response,
    responses=FILE_RESPONSES,
    tags=["deployments"],
)
def get_deployment_file(
    name: str, path: FilePath, request: Request, session: SessionDep, blobs: BlobsDep
) -> Response:
    """One file of the deployment's current release (ETag, If-None-Match, Range)."""
    return _one_file(request, blobs, _deployment_release(session, name), path)


@router.get(
    "/v1/deployments/{name}/archive",
    operation_id="deployments_archive",
    dependencies=[require("read")],
    response_class=Response,
    responses=ARCHIVE_RESPONSES,
    tags=["deployments"],
)
def get_deployment_archive(
    name: str, request: Request, session: SessionDep, blobs: BlobsDep
) -> Response:
    """The deployment's current release as a streamed tar; poll with If-None-Match."""
    return _archive(request, blobs, _deployment_release(session, name))
