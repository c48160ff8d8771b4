"""RETARGET_MERGE_DEVICE: auto and cpu merge to the same bytes on a host without CUDA,
and cuda there is refused when the worker or the API starts, not in a merge."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest
import torch
from safetensors.torch import save

from service.api.app import create_app
from service.config import Settings
from service.jobs.worker import build_worker
from service.merging import device
from service.merging.base import MergeInput
from service.merging.linear import LinearMerge

GEN = torch.Generator().manual_seed(7)


@pytest.fixture(autouse=True)
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This host as one without CUDA (whatever it has); the process's device reset after."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    yield
    device.configure_device("auto")


def inputs(tmp_path: Path) -> list[MergeInput]:
    out = []
    for k, weight in enumerate((0.3, 0.7, 0.125)):
        tensors = {
            "a.weight": torch.randn(33, 17, generator=GEN),
            "b.weight": torch.randn(5, 3, generator=GEN).to(torch.bfloat16),
            "c.half": torch.randn(9, generator=GEN).to(torch.float16),
        }
        path = tmp_path / f"m{k}.safetensors"
        path.write_bytes(save(tensors))
        out.append(MergeInput(path, weight))
    return out


def digest(method: LinearMerge, items: list[MergeInput]) -> str:
    h = hashlib.sha256()
    for chunk in method.chunks(items, {"retarget.release_id": "r"}):
        h.update(chunk)
    return h.hexdigest()


@pytest.mark.parametrize("out_dtype", [None, "BF16", "F32"])
def test_auto_and_cpu_merge_to_the_same_bytes(tmp_path: Path, out_dtype: str | None) -> None:
    items = inputs(tmp_path)
    assert device.configure_device("cpu") == torch.device("cpu")
    on_cpu = digest(LinearMerge(out_dtype=out_dtype), items)
    assert device.configure_device("auto") == torch.device("cpu")
    on_auto = digest(LinearMerge(out_dtype=out_dtype), items)
    assert on_cpu == on_auto
    # and the bytes are the weighted sum: another weight gives other bytes
    other = [MergeInput(items[0].path, 0.31), *items[1:]]
    assert digest(LinearMerge(out_dtype=out_dtype), other) != on_cpu


def test_on_the_cpu_an_input_is_used_as_it_is() -> None:
    t = torch.arange(6.0)
    assert device.ToDevice(torch.device("cpu"))(t) is t


def test_cuda_without_cuda_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"RETARGET_MERGE_DEVICE=cuda.*no CUDA device"):
        device.configure_device("cuda")
    assert device.merge_device() == torch.device("cpu")  # the refused setting is not kept
    settings = Settings(
        redis_url="redis://127.0.0.1:1/0",
        merge_device="cuda",
        data_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
    )
    with pytest.raises(SystemExit, match="RETARGET_MERGE_DEVICE=cuda"):
        build_worker(settings, queues=["merges"])
    with pytest.raises(ValueError, match="RETARGET_MERGE_DEVICE=cuda"):
        create_app(settings.model_copy(update={"redis_url": None}))


def test_an_unknown_merge_device_is_a_settings_error() -> None:
    with pytest.raises(pydantic.ValidationError, match="merge_device"):
        Settings(merge_device="gpu")
