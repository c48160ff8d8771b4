"""Where merges accumulate (``RETARGET_MERGE_DEVICE``: auto, cpu or cuda), and the copies
of tensors to that device and back.

The device is set once per process (``configure_device``, at worker or API start), so a
host asked for ``cuda`` without one refuses to start rather than failing mid-merge.
"""

from __future__ import annotations

import math

import torch

_setting = "auto"


def resolve_device(setting: str) -> torch.device:
    """The device ``setting`` names; ``cuda`` without a CUDA device is an error."""
    if setting == "cpu":
        return torch.device("cpu")
    if setting == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                "RETARGET_MERGE_DEVICE=cuda, but torch finds no CUDA device on this host "
                "(torch.cuda.is_available() is False); set it to auto or cpu"
            )
        return torch.device("cuda")
    if setting == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    raise ValueError(f"RETARGET_MERGE_DEVICE must be auto, cpu or cuda, not {setting!r}")


def configure_device(setting: str) -> torch.device:
    """Set this process's merge device (checked now); returns it."""
    global _setting
    device = resolve_device(setting)
    _setting = setting
    return device


def merge_device() -> torch.device:
    """The configured merge device (default auto: the GPU when there is one)."""
    return resolve_device(_setting)


class Buffer:
    """One reusable flat buffer, grown to the largest tensor and viewed per tensor, so the
    merge allocates nothing per tensor (and the allocator keeps nothing extra).
    ``pinned``: page-locked host memory (for non-blocking copies to and from a GPU)."""

    def __init__(self, dtype: torch.dtype, device: torch.device, pinned: bool = False) -> None:
        self.dtype = dtype
        self.device = device
        self.pinned = pinned
        self._raw = torch.empty(0, dtype=torch.uint8, device=device)

    def view(self, shape: list[int] | torch.Size) -> torch.Tensor:
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        need = math.prod(shape) * itemsize
        if self._raw.numel() < need:
            self._raw = torch.empty(0, dtype=torch.uint8, device=self.device)
            self._raw = torch.empty(
                need, dtype=torch.uint8, device=self.device, pin_memory=self.pinned
            )
        return self._raw[:need].view(self.dtype).view(shape)


class ToDevice:
    """Input tensors onto the merge device.

    On the CPU an input is used as it is (the caller never writes into it: it may be the
    memory-mapped file). On CUDA it is copied into one of two pinned host buffers, used
    in turn, then to the GPU without blocking; a buffer is written again only after the
    copy out of it has completed (its event), so at most two copies are in flight.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._host = [Buffer(torch.uint8, torch.device("cpu"), pinned=True) for _ in range(2)]
        self._done: list[torch.cuda.Event | None] = [None, None]
        self._turn = 0

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        if not self.cuda:
            return t
        k, self._turn = self._turn, 1 - self._turn
        done = self._done[k]
        if done is not None:
            done.synchronize()  # the previous copy out of this buffer has finished
        host = self._host[k]
        host.dtype = t.dtype
        staged = host.view(t.shape)
        staged.copy_(t)
        out = staged.to(self.device, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._done[k] = event
        return out


def to_host(acc: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Copy (and cast) ``acc`` into the host tensor ``out`` (pinned when ``acc`` is on a
    GPU), complete when this returns."""
    if acc.device.type == "cuda":
        out.copy_(acc, non_blocking=True)
        torch.cuda.current_stream(acc.device).synchronize()
    else:
        out.copy_(acc)
    return out
