"""What the Hugging Face Hub-compatible endpoint (``routes/hf.py``) serves: which
release a repository and a revision name, and the Hub's JSON for it.

Repositories: ``<deployment>`` (or ``deployments/<deployment>``), whose ``main`` is
the deployment's current release, and ``releases/<release id>``. A revision is
``main``, a release id or its 40-hex commit (``releases/revisions.py``); a
deployment answers only for releases it has served (its current one and those in
its history), so a pinned revision keeps its files while ``main`` moves on.

Every file is described as the Hub describes a Git LFS file: ``lfs.sha256`` (our
blob's sha256, the ETag), its size, and the Git object id of its LFS pointer, so a
client's checksum verification compares sha256s.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.deployments import policies as deployment_service
from service.errors import NotFound
from service.registry import repository
from service.registry.models import Deployment, DeploymentEvent, Release
from service.releases.pending import ready
from service.releases.revisions import MAIN, commit_of, release_of

DEPLOYMENTS, RELEASES = "deployments", "releases"
#: the repository id route convertor: a name, optionally under one of the two spaces
REPO_REGEX = rf"(?:{DEPLOYMENTS}/|{RELEASES}/)?[^/]+"


@dataclass(frozen=True)
class Snapshot:
    """One repository at one revision: the release and its files."""

    repo_id: str
    release: Release
    commit: str
    files: list[dict[str, Any]]

    def file(self, path: str) -> dict[str, Any]:
        for f in self.files:
            if f["path"] == path:
                return f
        raise NotFound(
            f"{self.repo_id} has no file {path!r} at {self.commit}",
            hf_error="EntryNotFound",
            commit=self.commit,
        )


def release_files(release: Release) -> list[dict[str, Any]]:
    """The release's folder (a single-file release is ``model.safetensors``)."""
    ready(release)
    if release.files is not None:
        return [dict(f) for f in release.files]
    return [{"path": "model.safetensors", "size": release.size_bytes, "sha256": release.sha256}]


def snapshot(session: Session, repo_id: str, revision: str) -> Snapshot:
    """The release ``repo_id`` serves at ``revision``; ``NotFound`` with ``hf_error``
    (RepoNotFound or RevisionNotFound) otherwise."""
    space, _, name = repo_id.rpartition("/")
    if space == RELEASES:
        release = _release(session, name, repo_id)
        if revision != MAIN and release_of(revision) != release.id:
            raise _no_revision(repo_id, revision)
    else:
        dep = _deployment(session, name, repo_id)
        if revision == MAIN:
            if dep.current_release_id is None:
                raise _no_revision(repo_id, revision, "the deployment has no release yet")
            release = _release(session, dep.current_release_id, repo_id)
        else:
            wanted = release_of(revision)
            if wanted is None or not _served(session, dep, wanted):
                raise _no_revision(repo_id, revision)
            release = _release(session, wanted, repo_id)
    return Snapshot(repo_id, release, commit_of(release.id), release_files(release))


def _release(session: Session, release_id: str, repo_id: str) -> Release:
    try:
        return repository.get_release(session=session, release_id=release_id)
    except NotFound as exc:
        raise NotFound(exc.detail, hf_error="RepoNotFound", repo_id=repo_id) from exc


def _deployment(session: Session, name: str, repo_id: str) -> Deployment:
    try:
        return deployment_service.get_deployment(session=session, name=name)
    except NotFound as exc:
        raise NotFound(exc.detail, hf_error="RepoNotFound", repo_id=repo_id) from exc


def _served(session: Session, dep: Deployment, release_id: str) -> bool:
    if dep.current_release_id == release_id:
        return True
    found = session.scalar(
        select(DeploymentEvent.id)
        .where(DeploymentEvent.deployment_id == dep.id, DeploymentEvent.release_id == release_id)
        .limit(1)
    )
    return found is not None


def _no_revision(repo_id: str, revision: str, why: str = "") -> NotFound:
    return NotFound(
        f"{repo_id} has no revision {revision[:80]!r}" + (f": {why}" if why else ""),
        hf_error="RevisionNotFound",
    )


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The Git LFS pointer file of a blob (what a Hub repository commits for it)."""
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    )


def git_oid(data: bytes) -> str:
    """The Git object id of a blob with these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _lfs(f: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    pointer = lfs_pointer(f["sha256"], int(f["size"]))
    return git_oid(pointer), {
        "sha256": f["sha256"],
        "size": int(f["size"]),
        "pointerSize": len(pointer),
    }


def model_info(snap: Snapshot) -> dict[str, Any]:
    """``GET /api/models/{repo_id}[/revision/{revision}]``: the Hub's model info."""
    siblings = []
    for f in sorted(snap.files, key=lambda f: f["path"]):
        oid, lfs = _lfs(f)
        siblings.append({"rfilename": f["path"], "size": lfs["size"], "blobId": oid, "lfs": lfs})
    created = snap.release.created_at.isoformat().replace("+00:00", "Z")
    library = "peft" if snap.release.kind == "peft_lora" else "transformers"
    return {
        "_id": snap.release.id,
        "id": snap.repo_id,
        "modelId": snap.repo_id,
        "sha": snap.commit,
        "lastModified": created,
        "createdAt": created,
        "private": True,
        "gated": False,
        "disabled": False,
        "library_name": library,
        "tags": [library, "safetensors", "differential-privacy"],
        "siblings": siblings,
        "usedStorage": sum(int(f["size"]) for f in snap.files),
    }


def tree(snap: Snapshot, path: str, recursive: bool) -> list[dict[str, Any]]:
    """``GET /api/models/{repo_id}/tree/{revision}[/{path}]``: the files (and, unless
    recursive, the folders) under ``path``; ``NotFound`` when nothing is there."""
    prefix = f"{path.strip('/')}/" if path.strip("/") else ""
    entries: dict[str, dict[str, Any]] = {}
    for f in sorted(snap.files, key=lambda f: f["path"]):
        if not f["path"].startswith(prefix):
            continue
        rest = f["path"][len(prefix) :]
        if not recursive and "/" in rest:
            folder = prefix + rest.split("/", 1)[0]
            oid = git_oid(f"{snap.commit}:{folder}".encode())
            entries.setdefault(folder, {"type": "directory", "oid": oid, "size": 0, "path": folder})
            continue
        if recursive:
            parts = f["path"].split("/")[:-1]
            for depth in range(len(prefix.split("/")) - 1, len(parts)):
                folder = "/".join(parts[: depth + 1])
                oid = git_oid(f"{snap.commit}:{folder}".encode())
                entries.setdefault(
                    folder, {"type": "directory", "oid": oid, "size": 0, "path": folder}
                )
        oid, lfs = _lfs(f)
        entries[f["path"]] = {
            "type": "file",
            "oid": oid,
            "size": lfs["size"],
            "path": f["path"],
            "lfs": {"oid": lfs["sha256"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]},
        }
    if not entries and prefix:
        raise NotFound(
            f"{snap.repo_id} has no folder {path!r} at {snap.commit}",
            hf_error="EntryNotFound",
            commit=snap.commit,
        )
    return list(entries.values())
