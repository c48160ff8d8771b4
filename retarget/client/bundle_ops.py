"""Bundles: a folder registered through resumable uploads, and a release's files (a
release's, a deployment's current one's, a model's) pulled into a folder. Operations
as in ``ops.py``: generators both clients drive.

Upload: every file is hashed, the service says which sha256s this key has not sent
yet (``POST /v1/uploads/missing``), only those are sent (``PUT /v1/uploads/{sha256}``),
and the registration names them all (``metadata.files``). Run again after an
interruption, it sends only what is missing; one progress count covers the folder.

Pull: the listing (path, size, sha256 of every file) first, then each file pinned to
the listed release, resumed from its ``.part``, checked against the ETag and against
the listing's sha256; files already current are kept (304).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from retarget.client.errors import DownloadCorrupt, InvalidInput
from retarget.client.folders import (
    BodyFile,
    folder_files,
    read_record,
    remove_stale,
    target_in,
    write_record,
)
from retarget.client.ops import Call, Fetch, Op, Progress, json_call, send
from retarget.client.transfer import sha256_of
from retarget.client.types import Download, FolderDownload

#: the most sha256s asked about in one call
ASK = 1024


def register_folder(
    folder: Path,
    metadata: dict[str, Any],
    progress: Progress | None = None,
    exist_ok: bool = False,
) -> Op[dict[str, Any]]:
    """Upload what the service lacks of ``folder`` and register it as one bundle
    (``exist_ok``: the same bundle registered already under this name is answered)."""
    files = [(rel, path, path.stat().st_size) for rel, path in folder_files(folder)]
    shas = {rel: sha256_of(path) for rel, path, _ in files}
    sizes: dict[str, tuple[Path, int]] = {}
    for rel, path, size in files:
        sizes.setdefault(shas[rel], (path, size))
    total = sum(size for _, size in sizes.values())
    meta = {**metadata, "files": [{"path": rel, "sha256": shas[rel]} for rel, _, _ in files]}
    for attempt in range(2):
        unique = list(sizes)
        missing: list[str] = []
        for i in range(0, len(unique), ASK):
            body = {"sha256": unique[i : i + ASK]}
            answer = yield from json_call(Call("POST", "/v1/uploads/missing", json=body))
            missing += list(answer["missing"])
        done = total - sum(sizes[sha][1] for sha in missing)
        if progress is not None:
            progress(done, total)
        for sha in missing:
            path, size = sizes[sha]
            body_file = BodyFile(path, size, progress, offset=done, total=total)
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
            yield from send(Call("PUT", f"/v1/uploads/{sha}", body=body_file, headers=headers))
            done += size
        params = {"exist_ok": "true"} if exist_ok else None
        call = Call("POST", "/v1/models", params=params, form={"metadata": json.dumps(meta)})
        try:
            return (yield from json_call(call, wait=None))
        except InvalidInput as exc:
            # an upload expired between the two steps: send it again, once
            if attempt or not exc.problem.get("missing"):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def pull_folder(
    listing: dict[str, Any],
    file_url: Callable[[str], str],
    folder: Path,
    progress: Progress | None = None,
) -> Op[FolderDownload]:
    """Every file of ``listing`` (``{release_id, kind, files}``) into ``folder``, each
    from ``file_url(path)``."""
    files = list(listing["files"])
    targets = {f["path"]: target_in(folder, f["path"]) for f in files}
    folder.mkdir(parents=True, exist_ok=True)
    before = read_record(folder)
    total = sum(int(f["size"]) for f in files)
    done = 0
    got: list[Download] = []
    for f in files:
        step = _offset(progress, done, total)
        fetch = Fetch(file_url(f["path"]), targets[f["path"]], step, if_changed=True)
        result: Download = yield fetch
        if result.sha256 != f["sha256"]:
            result.path.unlink(missing_ok=True)
            raise DownloadCorrupt(
                f"{f['path']}: the bytes hash to {result.sha256}, the listing says "
                f"{f['sha256']}; the file was removed, pull again"
            )
        got.append(result)
        done += int(f["size"])
        if progress is not None:
            progress(done, total)
    removed = remove_stale(folder, before, set(targets))
    record = {"release_id": listing.get("release_id"), "kind": listing.get("kind"), "files": files}
    write_record(folder, record)
    return FolderDownload(
        path=folder,
        release_id=listing.get("release_id"),
        kind=str(listing.get("kind", "")),
        files=got,
        removed=removed,
        changed=bool(removed) or any(d.changed for d in got),
    )


def _offset(progress: Progress | None, done: int, total: int) -> Progress | None:
    if progress is None:
        return None
    return lambda n, _: progress(done + n, total)


def release_pull(release_id: str, folder: Path, progress: Progress | None) -> Op[FolderDownload]:
    seg = quote(release_id, safe="")
    listing = yield from json_call(Call("GET", f"/v1/releases/{seg}/files"))
    return (yield from pull_folder(listing, _files_of("releases", seg), folder, progress))


def deployment_pull(name: str, folder: Path, progress: Progress | None) -> Op[FolderDownload]:
    """The current release's files, each fetched from that release (pinned: a policy
    change during the pull never mixes two releases in the folder)."""
    listing = yield from json_call(Call("GET", f"/v1/deployments/{quote(name, safe='')}/files"))
    seg = quote(str(listing["release_id"]), safe="")
    return (yield from pull_folder(listing, _files_of("releases", seg), folder, progress))


def model_pull(model_id: str, folder: Path, progress: Progress | None) -> Op[FolderDownload]:
    """A registered model's raw files (scope ``models:download``; each file downloaded,
    not a 304, is charged to the dataset's ledger as an exposure of the model)."""
    seg = quote(model_id, safe="")
    model = yield from json_call(Call("GET", f"/v1/models/{seg}"))
    files = model.get("files") or [
        {"path": "model.safetensors", "size": model["size_bytes"], "sha256": model["sha256"]}
    ]
    listing = {"release_id": None, "kind": model.get("kind", "safetensors"), "files": files}
    return (yield from pull_folder(listing, _files_of("models", seg), folder, progress))


def _files_of(kind: str, seg: str) -> Callable[[str], str]:
    return lambda path: f"/v1/{kind}/{seg}/files/{quote(path)}"
