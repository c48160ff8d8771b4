"""The client's folder transfers without a server: which files a folder upload sends,
and what a pull refuses from a service that lists paths outside the folder or bytes
that do not match its listing (a hostile or broken service, played by a mock
transport), and which files a later pull removes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from retarget.client import RetargetClient
from retarget.client.errors import DownloadCorrupt
from retarget.client.folders import RECORD, folder_files


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_folder_upload_leaves_hidden_and_partial_files_out(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / ".cache" / "huggingface").mkdir(parents=True)
    for name in ("config.json", "sub/tokenizer.json", ".DS_Store", "model.safetensors.part"):
        (tmp_path / name).write_text("x")
    (tmp_path / ".cache" / "huggingface" / "lock").write_text("x")
    (tmp_path / "linked.json").symlink_to(tmp_path / "config.json")  # a Hub snapshot's kind
    assert [rel for rel, _ in folder_files(tmp_path)] == [
        "config.json",
        "linked.json",
        "sub/tokenizer.json",
    ]
    with pytest.raises(FileNotFoundError):
        folder_files(tmp_path / "sub" / "tokenizer.json")


def serve(listing: list[dict], contents: dict[str, bytes]) -> RetargetClient:
    """A service with one release ``r`` whose listing and file bytes are given."""

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/releases/r/files":
            return httpx.Response(
                200, json={"release_id": "r", "kind": "hf_bundle", "files": listing}
            )
        name = path.removeprefix("/v1/releases/r/files/")
        data = contents[name]
        if request.headers.get("if-none-match") == f'"{sha(data)}"':
            return httpx.Response(304)
        return httpx.Response(200, content=data, headers={"ETag": f'"{sha(data)}"'})

    return RetargetClient("http://service.invalid", "k", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("bad", ["../escape.json", "/etc/x.json", "a/../../b.json", ".hidden"])
def test_a_pull_refuses_paths_outside_its_folder(tmp_path: Path, bad: str) -> None:
    listing = [{"path": bad, "size": 1, "sha256": sha(b"x")}]
    with serve(listing, {bad: b"x"}) as rt, pytest.raises(DownloadCorrupt):
        rt.releases.download_folder("r", tmp_path / "out")
    assert not (tmp_path / "escape.json").exists()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_file_that_does_not_match_the_listing_is_removed(tmp_path: Path) -> None:
    listing = [{"path": "config.json", "size": 2, "sha256": sha(b"{}")}]
    # the ETag agrees with the bytes, the listing does not: the listing wins
    with serve(listing, {"config.json": b"[]"}) as rt, pytest.raises(DownloadCorrupt):
        rt.releases.download_folder("r", tmp_path / "out")
    assert not (tmp_path / "out" / "config.json").exists()


def test_a_later_pull_removes_only_the_files_an_earlier_pull_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = {"model.safetensors": b"one", "config.json": b"{}"}
    listing = [{"path": p, "size": len(d), "sha256": sha(d)} for p, d in first.items()]
    with serve(listing, first) as rt:
        got = rt.releases.download_folder("r", out)
    assert got.changed and {p.name for p in out.iterdir()} == {*first, RECORD}
    (out / "mine.txt").write_text("the operator's own file")
    second = {
        "model-1.safetensors": b"a",
        "model.safetensors.index.json": b"{}",
        "config.json": b"{}",
    }
    listing = [{"path": p, "size": len(d), "sha256": sha(d)} for p, d in second.items()]
    with serve(listing, second) as rt:
        got = rt.releases.download_folder("r", out)
    assert got.removed == ["model.safetensors"]
    assert {p.name for p in out.iterdir()} == {*second, RECORD, "mine.txt"}
    kept = [d for d in got.files if d.path.name == "config.json"]
    assert kept and kept[0].changed is False  # current: not sent again (304)
    assert json.loads((out / RECORD).read_text())["files"] == listing
