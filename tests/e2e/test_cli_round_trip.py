"""The CLI against a running service, as a user or a script runs it."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from retarget.client.transfer import sha256_of
from service import __version__
from tests.helpers import service_env

CLI = [sys.executable, "-m", "retarget.cli"]


def _env(base: str, key: str) -> dict[str, str]:
    return service_env(RETARGET_URL=base, RETARGET_API_KEY=key)


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _json(args: list[str], env: dict[str, str], cwd: Path) -> dict:
    out = _run([*args, "--json"], env, cwd)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def _checkpoint(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    save_file(
        {"w": rng.standard_normal((8, 16)).astype(np.float32), "b": np.zeros(8, np.float32)},
        str(path),
    )


def _mechanism(sigma: float) -> str:
    return json.dumps(
        {
            "type": "dp_sgd",
            "sampling_rate": 0.01,
            "noise_multiplier": sigma,
            "clipping_norm": 1.0,
            "steps": 200,
            "learning_rate": 0.1,
        }
    )


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    out = _run(["--version"], service_env(), tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"retarget {__version__}"


def test_the_round_trip_with_json(live_service: tuple[str, str], tmp_path: Path) -> None:
    env = _env(*live_service)
    ds = _json(["datasets", "create", "cli-round-trip"], env, tmp_path)
    ids = []
    for i, sigma in enumerate((0.9, 2.5)):
        _checkpoint(tmp_path / f"m{i}.safetensors", i)
        (tmp_path / f"mech{i}.json").write_text(_mechanism(sigma))
        model = _json(
            [
                *("models", "register", f"m{i}.safetensors", "--dataset", ds["id"]),
                *("--name", f"m{i}", "--mechanism", f"@mech{i}.json", "--metric", "accuracy=0.9"),
                *("--run-id", f"run-{i}", "--step", "200"),
            ],
            env,
            tmp_path,
        )
        assert model["sha256"] == sha256_of(tmp_path / f"m{i}.safetensors")
        assert model["metrics"] == {"accuracy": 0.9}
        ids.append(model["id"])
    eps = [_json(["models", "epsilon", m], env, tmp_path)["epsilon"] for m in ids]
    target = str(round(sum(eps) / 2, 3))
    target_args = ["--dataset", ds["id"], "--epsilon", target, "--delta", "1e-5"]
    plan = _json(["plan", *target_args], env, tmp_path)
    assert plan["epsilon"] <= float(target)
    table = _run(["plan", *target_args], env, tmp_path)
    # which objective chose the plan, in words; the models by name, not only by id
    assert table.returncode == 0 and "chosen by: objective 'signal'" in table.stdout
    assert {w["model_name"] for w in plan["weights"]} <= {"m0", "m1"}
    assert any(w["model_name"] in table.stdout for w in plan["weights"])
    listed_models = _run(["models", "list", "--dataset", ds["id"]], env, tmp_path)
    assert listed_models.returncode == 0 and "1e-05" in listed_models.stdout
    assert f"{eps[0]:.4g}" in listed_models.stdout  # each model's epsilon at that delta
    release = _json(["release", *target_args, "-o", "merged.safetensors"], env, tmp_path)
    assert (
        release["output"]["sha256"]
        == release["sha256"]
        == sha256_of(tmp_path / "merged.safetensors")
    )
    dep = _json(["deployments", "create", "prod", *target_args], env, tmp_path)
    assert dep["name"] == "prod" and dep["current_release_id"]
    pulled = _json(["deployments", "pull", "prod", "-o", "prod.safetensors"], env, tmp_path)
    assert pulled["changed"] and pulled["sha256"] == sha256_of(tmp_path / "prod.safetensors")
    again = _json(["deployments", "pull", "prod", "-o", "prod.safetensors"], env, tmp_path)
    assert again["changed"] is False  # already current: 304, nothing written
    listed = _json(["deployments", "list"], env, tmp_path)
    assert [d["name"] for d in listed["data"]] == ["prod"] and listed["count"] == 1
    models = _json(["models", "list", "--dataset", ds["id"]], env, tmp_path)
    assert sorted(m["id"] for m in models["data"]) == sorted(ids)


def test_exit_codes_tell_usage_refusal_and_unreachable(
    live_service: tuple[str, str], tmp_path: Path
) -> None:
    env = _env(*live_service)
    usage = _run(["plan", "--epsilon", "1"], env, tmp_path)
    assert usage.returncode == 2 and "Missing option" in usage.stderr
    ds = _json(["datasets", "create", "cli-refusals"], env, tmp_path)
    _checkpoint(tmp_path / "m.safetensors", 0)
    _json(
        [
            *("models", "register", "m.safetensors", "--dataset", ds["id"]),
            *("--name", "m", "--mechanism", _mechanism(1.0)),
        ],
        env,
        tmp_path,
    )
    refused = _run(
        ["plan", "--dataset", ds["id"], "--epsilon", "0.01", "--delta", "1e-5"], env, tmp_path
    )
    assert refused.returncode == 4
    assert "infeasible-target" in refused.stderr and "min_epsilon" in refused.stderr
    missing = _run(["models", "show", "no-such-model"], env, tmp_path)
    assert missing.returncode == 4 and "not-found" in missing.stderr
    bad_key = _run(["datasets", "list"], _env(live_service[0], "rt_wrong"), tmp_path)
    assert bad_key.returncode == 4 and "unauthorized" in bad_key.stderr
    down = _run(["datasets", "list", "--url", "http://127.0.0.1:9"], env, tmp_path)
    assert down.returncode == 5 and "cannot reach" in down.stderr


def test_keys_through_the_api(live_service: tuple[str, str], tmp_path: Path) -> None:
    env = _env(*live_service)
    made = _json(["keys", "create", "--scope", "read", "--name", "ci", "--remote"], env, tmp_path)
    listed = _json(["keys", "list", "--remote"], env, tmp_path)
    assert made["id"] in [k["id"] for k in listed["data"]]
    revoked = _json(["keys", "revoke", made["id"], "--remote"], env, tmp_path)
    assert revoked["revoked_at"] is not None


def test_an_upload_shows_progress_on_a_terminal(
    live_service: tuple[str, str], tmp_path: Path
) -> None:
    env = _env(*live_service)
    ds = _json(["datasets", "create", "cli-tty"], env, tmp_path)
    _checkpoint(tmp_path / "tty.safetensors", 3)
    args = [
        *("models", "register", "tty.safetensors", "--dataset", ds["id"]),
        *("--name", "tty", "--mechanism", _mechanism(1.0)),
    ]
    primary, secondary = pty.openpty()
    env = {**env, "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen(
        [*CLI, *args], env=env, cwd=tmp_path, stdin=secondary, stdout=secondary, stderr=secondary
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=120) == 0
    os.close(primary)
    shown = b"".join(chunks).decode(errors="replace")
    assert "upload tty.safetensors" in shown
    assert "sha256" in shown  # then the model's table
