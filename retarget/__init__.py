"""Retarget's SDK: what runs in a trainer's or a serving host's process.

    import retarget

    rt = retarget.RetargetClient("http://127.0.0.1:8000", api_key)   # or AsyncRetargetClient
    rt.models.register("model.safetensors", dataset_id=..., name=..., mechanism=...)

    recorder = retarget.OpacusRecorder.attach(optimizer, data_loader)   # needs torch
    retarget.register_checkpoint(rt, model, recorder, dataset_id=..., name=...)

The client talks to the service over HTTP only; this package imports nothing of the
server (``service``), which an import-linter contract enforces. Names are imported
when first used: the recorder needs torch and Opacus, the trainer's own dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from retarget._version import __version__

if TYPE_CHECKING:
    from retarget.client import (
        ApiError,
        AsyncRetargetClient,
        ClientError,
        RetargetClient,
        RetargetClientError,
        ServerError,
        errors,
    )
    from retarget.opacus import OpacusRecorder, register_checkpoint

__all__ = [
    "ApiError",
    "AsyncRetargetClient",
    "ClientError",
    "OpacusRecorder",
    "RetargetClient",
    "RetargetClientError",
    "ServerError",
    "__version__",
    "errors",
    "register_checkpoint",
]

#: imported when first used: ``import retarget`` stays cheap (the server imports the
#: version from here), and the recorder needs torch (the trainer's dependency, not ours)
_LAZY = {
    **{
        name: "retarget.client"
        for name in (
            "ApiError",
            "AsyncRetargetClient",
            "ClientError",
            "RetargetClient",
            "RetargetClientError",
            "ServerError",
            "errors",
        )
    },
    "OpacusRecorder": "retarget.opacus",
    "register_checkpoint": "retarget.opacus",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'retarget' has no attribute {name!r}")
