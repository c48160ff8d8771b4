"""The quickstart, by names only, run twice in one folder through the real CLI against a
real `retarget serve`: the second run finds what the first made and succeeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import service_env

#: The quickstart as a user types it (docs/names.md), with `retarget` the CLI of this
#: interpreter. Checkpoints are seeded, so a second run writes the same bytes.
QUICKSTART = r"""
set -euo pipefail
retarget() { "$PYTHON" -m retarget.cli "$@"; }
"$PYTHON" -c "
import numpy as np; from safetensors.numpy import save_file
for i in (1, 2):
    rng = np.random.default_rng(i)
    save_file({'w': rng.standard_normal((10, 64)).astype(np.float32),
               'b': np.zeros(10, np.float32)}, f'model{i}.safetensors')"
MECH='{"type": "dp_sgd", "sampling_rate": 0.004, "clipping_norm": 1.0, "steps": 700, '\
'"learning_rate": 0.1, "optimizer": "sgd", "noise_multiplier": '
retarget datasets create digits --exist-ok
retarget models register model1.safetensors --dataset digits --name sigma-0.8 \
  --mechanism "$MECH 0.8}" --metric accuracy=0.93 --exist-ok
retarget models register model2.safetensors --dataset digits --name sigma-2 \
  --mechanism "$MECH 2.0}" --metric accuracy=0.88 --exist-ok
retarget models list --dataset digits
retarget models alias set digits/sigma-2@1 champion
retarget models tag set digits/sigma-2@champion stage=prod reviewed
retarget models show digits/sigma-2@champion
retarget plan --dataset digits --epsilon 1.0 --delta 1e-5 --model sigma-0.8 --model sigma-2@champion
retarget release --dataset digits --epsilon 1.0 --delta 1e-5 -o merged.safetensors
retarget deployments create prod --dataset digits --epsilon 1.0 --delta 1e-5 --exist-ok
retarget deployments set-policy prod --epsilon 0.5 --delta 1e-6 --reason "policy v2"
retarget deployments pull prod -o prod.safetensors
retarget deployments create champion --follows digits/sigma-2@champion \
  --epsilon 1.0 --delta 1e-5 --exist-ok
retarget deployments pull champion -o champion.safetensors
"""


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retarget.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_quickstart_runs_twice_by_names_only(server: tuple[str, Path], tmp_path: Path) -> None:
    base, data = server
    env = service_env(
        RETARGET_URL=base,
        RETARGET_API_KEY=(data / "admin-key").read_text().strip(),
        PYTHON=sys.executable,
        COLUMNS="200",
    )
    folder = tmp_path / "work"
    folder.mkdir()
    runs = []
    for _ in range(2):
        run = subprocess.run(
            ["bash", "-c", QUICKSTART],
            env=env,
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
        runs.append(run)
    assert "digits/sigma-2@champion" in runs[1].stdout

    def listed(*args: str) -> dict:
        out = _cli([*args, "--json"], env, folder)
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    assert listed("datasets", "list")["count"] == 1
    models = listed("models", "list", "--dataset", "digits")
    assert sorted(m["ref"] for m in models["data"]) == ["digits/sigma-0.8@1", "digits/sigma-2@1"]
    champion = listed("models", "show", "digits/sigma-2@champion")
    assert champion["aliases"] == ["champion"]
    assert champion["tags"] == {"reviewed": "", "stage": "prod"}
    deployments = listed("deployments", "list")
    assert sorted(d["name"] for d in deployments["data"]) == ["champion", "prod"]
    followed = listed("deployments", "show", "champion")
    assert followed["follows"] == "digits/sigma-2@champion"
    history = listed("models", "alias", "show", "digits/sigma-2")["history"]
    assert len(history) == 1  # the second run's set changed nothing

    # a version whose own epsilon is over the following deployment's policy: the alias
    # moves, the deployment stays, and the CLI says so with exit 4
    mech = {"type": "dp_sgd", "sampling_rate": 0.004, "clipping_norm": 1.0, "steps": 700}
    mech |= {"learning_rate": 0.1, "optimizer": "sgd", "noise_multiplier": 0.3}
    hot = _cli(
        [
            *("models", "register", "model1.safetensors", "--dataset", "digits"),
            *("--name", "sigma-2", "--version", "2", "--mechanism", json.dumps(mech)),
        ],
        env,
        folder,
    )
    assert hot.returncode == 0, hot.stderr
    before = listed("deployments", "show", "champion")["current_release_id"]
    moved = _cli(["models", "alias", "set", "digits/sigma-2@2", "champion"], env, folder)
    assert moved.returncode == 4, moved.stdout + moved.stderr
    assert "deployment champion stays on its current model" in moved.stderr
    assert listed("deployments", "show", "champion")["current_release_id"] == before
    assert listed("models", "show", "digits/sigma-2@champion")["version"] == 2

    typo = _cli(["models", "show", "digits/sigma-0.9"], env, folder)
    assert typo.returncode == 4
    assert "did you mean 'digits/sigma-0.8'" in typo.stderr
    wrong_dataset = _cli(["models", "list", "--dataset", "digit"], env, folder)
    assert wrong_dataset.returncode == 4 and "did you mean 'digits'" in wrong_dataset.stderr
    changed = _cli(
        ["datasets", "create", "digits", "--exist-ok", "--epsilon-cap", "3"], env, folder
    )
    assert changed.returncode == 4 and "epsilon_cap" in changed.stderr
