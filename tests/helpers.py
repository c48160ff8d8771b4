"""Small builders shared by the tests."""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

import torch
from safetensors.torch import save

DP_SGD = {
    "type": "dp_sgd",
    "sampling": "poisson",
    "sampling_rate": 0.004,
    "noise_multiplier": 1.0,
    "clipping_norm": 1.0,
    "steps": 700,
    "learning_rate": 0.1,
    "optimizer": "sgd",
}


def sgd(sigma: float, steps: int = 400, q: float = 0.01, lr: float = 0.1, **extra: Any) -> dict:
    """A Poisson DP-SGD mechanism with plain SGD (what linear combination can account)."""
    return {
        "type": "dp_sgd",
        "sampling_rate": q,
        "noise_multiplier": sigma,
        "clipping_norm": 1.0,
        "steps": steps,
        "learning_rate": lr,
        **extra,
    }


#: seeds of checkpoints asked for without one: each call other bytes (a dataset refuses
#: the same bytes twice: a copy is not a second run)
_FRESH_SEEDS = itertools.count(1_000_000)


def checkpoint_bytes(
    seed: int | None = None, shapes: dict[str, tuple[int, ...]] | None = None
) -> bytes:
    """A small safetensors checkpoint: ``seed`` fixes its bytes; without one, each call
    gives new bytes."""
    gen = torch.Generator().manual_seed(next(_FRESH_SEEDS) if seed is None else seed)
    shapes = shapes or {"linear.weight": (10, 64), "linear.bias": (10,)}
    return save({name: torch.randn(shape, generator=gen) for name, shape in shapes.items()})


def pickle_bytes() -> bytes:
    buf = io.BytesIO()
    torch.save({"linear.weight": torch.randn(10, 64)}, buf)
    return buf.getvalue()


def model_metadata(dataset_id: str, name: str = "lr", **extra: Any) -> str:
    meta: dict[str, Any] = {"dataset_id": dataset_id, "name": name, "mechanism": DP_SGD}
    meta.update(extra)
    return json.dumps(meta)


def upload(client: Any, weights: bytes, metadata: str) -> Any:
    return client.post(
        "/v1/models",
        files={"weights": ("model.safetensors", weights, "application/octet-stream")},
        data={"metadata": metadata},
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(base: str, limit_s: float = 60, alive: Any = None) -> bool:
    """Poll ``base``/healthz until it answers 200 (False after ``limit_s`` or once
    ``alive()`` says the server process is gone)."""
    import time

    import httpx2

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                return True
        except httpx2.TransportError:
            pass
        if alive is not None and not alive():
            return False
        time.sleep(0.2)
    return False


def service_env(**settings: str) -> dict[str, str]:
    """This process's environment without any RETARGET_* setting, plus ``settings``."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("RETARGET_")}
    env.update(settings)
    return env


def migrate_and_admin_key(env: dict[str, str]) -> str:
    """Bring the database of ``env`` to the newest schema; return a new admin key."""
    import subprocess
    import sys

    cli = [sys.executable, "-m", "retarget.cli"]
    subprocess.run([*cli, "migrate"], env=env, check=True, capture_output=True)
    out = subprocess.run(
        [*cli, "keys", "create", "--scope", "admin"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.split()[0]
