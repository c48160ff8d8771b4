"""A Hugging Face Hub-compatible read endpoint at ``/hf``: serving stacks that load
from a Hub (``huggingface_hub.snapshot_download``, ``transformers`` with
``HF_ENDPOINT``, vLLM and TGI through them) pull deployments and releases as they
pull Hub repositories.

    snapshot_download(repo_id="<deployment>", endpoint="<service>/hf", token="<key>")

The routes are the few those clients use: model info (``sha``: the revision's commit,
``siblings``), the file tree, and ``resolve/<revision>/<path>`` (HEAD and GET) with
the headers they read: ``X-Repo-Commit``, ``ETag`` and ``X-Linked-Etag`` (the file's
sha256), ``X-Linked-Size``; Range and 304 from ``blob_response``; when the blob
store presigns, a 302 to the object (as the Hub redirects Git LFS files to its CDN),
the metadata on the redirect itself. Errors carry ``X-Error-Code`` (RepoNotFound,
RevisionNotFound, EntryNotFound) as the Hub's do, in a problem+json body.

Which release a repository and revision name: ``service/api/hf_hub.py``. Scope
``read``; the key is the client's token (``Authorization: Bearer``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.convertors import Convertor, register_url_convertor

from service.api import hf_hub
from service.api.blob_responses import WEIGHTS_RESPONSES, blob_response, etag_for
from service.api.deps import BlobsDep, SessionDep, require
from service.api.problems import for_domain_error
from service.api.schemas import Problem
from service.errors import NotFound, StorageError
from service.releases.revisions import MAIN


class RepoConvertor(Convertor[str]):
    """A repository id: ``name``, ``deployments/name`` or ``releases/id``."""

    regex = hf_hub.REPO_REGEX

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("hfrepo", RepoConvertor())

router = APIRouter(prefix="/hf", tags=["hf"], dependencies=[require("read")])

Revision = Annotated[str, Path(max_length=100)]
FilePath = Annotated[str, Path(max_length=512)]
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {
        "model": Problem,
        "description": "X-Error-Code: RepoNotFound, RevisionNotFound or EntryNotFound",
    },
}


def answer(build: Callable[[], Response]) -> Response:
    """``build()``, a not-found answered with the Hub's error headers."""
    try:
        return build()
    except NotFound as exc:
        response = for_domain_error(exc)
        response.headers["X-Error-Code"] = str(exc.extra.get("hf_error", "RepoNotFound"))
        response.headers["X-Error-Message"] = exc.detail[:200].encode("ascii", "replace").decode()
        if "commit" in exc.extra:
            response.headers["X-Repo-Commit"] = str(exc.extra["commit"])
        return response


def _info(session: SessionDep, repo_id: str, revision: str) -> Response:
    return answer(
        lambda: JSONResponse(hf_hub.model_info(hf_hub.snapshot(session, repo_id, revision)))
    )


@router.get(
    "/api/models/{repo_id:hfrepo}/revision/{revision}",
    operation_id="hf_model_info_revision",
    responses=NOT_FOUND,
)
def model_info_at(repo_id: str, revision: Revision, session: SessionDep) -> Response:
    """The Hub's model info at a revision: ``sha`` (the commit) and ``siblings``."""
    return _info(session, repo_id, revision)


@router.get("/api/models/{repo_id:hfrepo}", operation_id="hf_model_info", responses=NOT_FOUND)
def model_info(repo_id: str, session: SessionDep) -> Response:
    """The Hub's model info at ``main`` (a deployment's current release)."""
    return _info(session, repo_id, MAIN)


def _tree(session: SessionDep, repo_id: str, revision: str, path: str, recursive: bool) -> Response:
    return answer(
        lambda: JSONResponse(
            hf_hub.tree(hf_hub.snapshot(session, repo_id, revision), path, recursive)
        )
    )


Recursive = Annotated[bool, Query()]


@router.get(
    "/api/models/{repo_id:hfrepo}/tree/{revision}",
    operation_id="hf_tree",
    responses=NOT_FOUND,
)
def tree(
    repo_id: str,
    revision: Revision,
    session: SessionDep,
    recursive: Recursive = False,
    expand: Recursive = False,
) -> Response:
    """The files at a revision (one page: a bundle holds at most 1,024 files)."""
    return _tree(session, repo_id, revision, "", recursive)


@router.get(
    "/api/models/{repo_id:hfrepo}/tree/{revision}/{path:path}",
    operation_id="hf_tree_path",
    responses=NOT_FOUND,
)
def tree_under(
    repo_id: str,
    revision: Revision,
    path: FilePath,
    session: SessionDep,
    recursive: Recursive = False,
    expand: Recursive = False,
) -> Response:
    """The files (and folders, unless recursive) under ``path`` at a revision."""
    return _tree(session, repo_id, revision, path, recursive)


RESOLVE = "/{repo_id:hfrepo}/resolve/{revision}/{path:path}"
RESOLVE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **WEIGHTS_RESPONSES,
    302: {"description": "the object, presigned (when the blob store presigns)"},
    **NOT_FOUND,
}


@router.head(
    RESOLVE, operation_id="hf_resolve_head", response_class=Response, responses=RESOLVE_RESPONSES
)
@router.get(
    RESOLVE, operation_id="hf_resolve", response_class=Response, responses=RESOLVE_RESPONSES
)
def resolve(
    repo_id: str,
    revision: Revision,
    path: FilePath,
    request: Request,
    session: SessionDep,
    blobs: BlobsDep,
) -> Response:
    """One file at a revision, as the Hub serves it (HEAD: its metadata only)."""

    def build() -> Response:
        snap = hf_hub.snapshot(session, repo_id, revision)
        f = snap.file(path)
        sha, size = str(f["sha256"]), int(f["size"])
        hub = {
            "X-Repo-Commit": snap.commit,
            "X-Linked-Etag": etag_for(sha),
            "X-Linked-Size": str(size),
        }
        filename = path.rsplit("/", 1)[-1]
        presign = getattr(blobs, "presign", None)
        if presign is not None:
            if not blobs.exists(sha):
                raise StorageError(f"blob {sha} is missing from the store")
            return RedirectResponse(
                presign(sha, filename), status_code=302, headers={**hub, "ETag": etag_for(sha)}
            )
        if request.method == "HEAD":
            if not blobs.exists(sha):
                raise StorageError(f"blob {sha} is missing from the store")
            return Response(
                status_code=200,
                headers={
                    **hub,
                    "ETag": etag_for(sha),
                    "Content-Length": str(size),
                    "Accept-Ranges": "bytes",
                    "Content-Type": "application/octet-stream",
                    "Content-Disposition": f"attachment; filename*=UTF-8''{quote(filename)}",
                },
            )
        response = blob_response(request, blobs, sha, filename)
        response.headers.update(hub)
        return response

    return answer(build)
