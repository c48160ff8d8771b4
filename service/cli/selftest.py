"""`retarget selftest`: after an install, walk the whole path once and say what worked.

Starts `retarget serve` on a free loopback port with its data in a temporary folder,
registers two generated checkpoints (DP-SGD mechanisms with different noise), plans
a target between their epsilons, releases it and downloads the merged file, checks
it (sha256, and the weights: a weighted sum for LC, one of the inputs for RS),
creates a deployment and pulls it, then stops the service and removes the folder.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from retarget.client import RetargetClient
from retarget.client.transfer import sha256_of

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
SHAPES = {"linear.weight": (10, 64), "linear.bias": (10,)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_service(folder: Path) -> Iterator[tuple[str, str]]:
    """A `retarget serve` on loopback with its data in ``folder``: (url, admin key)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETARGET_")}
    env["RETARGET_DATA_DIR"] = str(folder / "data")
    log = (folder / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
        env=env,
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        key_file = folder / "data" / "admin-key"
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited: {(folder / 'serve.log').read_text()}")
            if key_file.is_file() and _healthy(url):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the service did not start within 120 s")
            time.sleep(0.2)
        yield url, key_file.read_text().strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _healthy(url: str) -> bool:
    try:
        with RetargetClient(url, "") as rt:
            return rt.health().get("status") == "ok"
    except Exception:
        return False


def _checkpoint(path: Path, seed: int) -> dict[str, np.ndarray]:
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    tensors = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    save_file(tensors, str(path))
    return tensors


def _mechanism(sigma: float) -> dict[str, Any]:
    return {
        "type": "dp_sgd",
        "sampling_rate": 0.01,
        "noise_multiplier": sigma,
        "clipping_norm": 1.0,
        "steps": 300,
        "learning_rate": 0.1,
        "optimizer": "sgd",
    }


def _check_merged(
    path: Path, sha256: str, inputs: dict[str, dict[str, np.ndarray]], plan: Any
) -> str:
    import numpy as np
    from safetensors.numpy import load_file

    if sha256_of(path) != sha256:
        raise AssertionError("the downloaded file does not hash to the release's sha256")
    merged = load_file(str(path))
    weights = {w.model_id: w.weight for w in plan.weights}
    if plan.method == "lc":
        for name in SHAPES:
            expected = sum(weights[m] * inputs[m][name] for m in weights)
            if not np.allclose(merged[name], expected, atol=1e-5):
                raise AssertionError(f"{name} is not the weighted sum of the inputs")
        return "the weighted sum of the inputs"
    if not any(all(np.array_equal(merged[n], t[n]) for n in SHAPES) for t in inputs.values()):
        raise AssertionError("the RS release is none of the inputs")
    return "one of the inputs, drawn once"


def selftest(
    keep: Annotated[bool, typer.Option(help="keep the temporary folder")] = False,
) -> int:
    """Start a throwaway service, register two generated models, plan, release, download,
    verify, deploy and pull, then clean up; each step printed."""
    folder = Path(tempfile.mkdtemp(prefix="retarget-selftest-"))
    started = time.perf_counter()

    def step(what: str, run: Callable[[], T], say: Callable[[T], str] = lambda _: "") -> T:
        t0 = time.perf_counter()
        typer.echo(f"  {what} ...", nl=False)
        value = run()
        extra = say(value)
        typer.echo(f" ok ({time.perf_counter() - t0:.1f} s){': ' + extra if extra else ''}")
        return value

    stack = ExitStack()
    try:
        typer.echo(f"selftest in {folder}")
        url, key = step("start the service", lambda: stack.enter_context(local_service(folder)))
        with stack:
            with RetargetClient(url, key) as rt:
                ds = step("create a dataset", lambda: rt.datasets.create("selftest"))
                inputs: dict[str, dict[str, np.ndarray]] = {}
                eps = []
                for i, sigma in enumerate((0.8, 2.0)):
                    path = folder / f"model-{i}.safetensors"
                    tensors = _checkpoint(path, seed=i)
                    m = step(
                        f"register model {i} (dp_sgd, sigma {sigma})",
                        partial(
                            rt.models.register,
                            path,
                            dataset_id=ds.id,
                            name=f"model-{i}",
                            mechanism=_mechanism(sigma),
                        ),
                    )
                    inputs[m.id] = tensors
                    e = step(
                        f"epsilon of model {i}",
                        partial(rt.models.epsilon, m.id, delta=1e-5),
                        lambda r: f"{r.epsilon} at delta 1e-5",
                    )
                    eps.append(e.epsilon)
                target = round((eps[0] + eps[1]) / 2, 3)
                step(
                    f"plan epsilon {target} at delta 1e-5",
                    lambda: rt.plans.create(ds.id, target, 1e-5),
                    lambda p: f"{p.method}, epsilon {p.epsilon}",
                )
                made = step(
                    "release it",
                    lambda: rt.releases.create(ds.id, target, 1e-5),
                    lambda r: f"release {r.release_id}",
                )
                out = folder / "merged.safetensors"
                got = step("download it", lambda: rt.releases.download(made.release_id, out))
                step(
                    "verify it",
                    lambda: _check_merged(got.path, made.sha256, inputs, made),
                    lambda what: f"sha256 matches; {what}",
                )
                step(
                    "create a deployment",
                    lambda: rt.deployments.create("selftest", ds.id, target, 1e-5),
                )
                pulled = step(
                    "pull it",
                    lambda: rt.deployments.pull("selftest", folder / "pulled.safetensors"),
                    lambda d: d.sha256[:16],
                )
                if pulled.sha256 != sha256_of(pulled.path):
                    raise AssertionError("the pulled file does not hash to its sha256")
            step("stop the service", stack.close)
    except Exception as exc:
        stack.close()
        typer.echo(f" FAILED\nselftest failed: {exc}", err=True)
        typer.echo(f"(the service's log and files are in {folder})", err=True)
        return 1
    if keep:
        typer.echo(f"kept {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
        typer.echo(f"  clean up ... ok (removed {folder})")
    typer.echo(f"selftest passed in {time.perf_counter() - started:.0f} s")
    return 0
