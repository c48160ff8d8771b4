"""The docs' commands still work: every block marked runnable in README.md and docs/*.md
runs, twice in a row in one folder, against a real `retarget serve` on its embedded
defaults, and prints what its `# prints:` comments say.

A block is runnable when the line before its fence is ``<!-- runnable -->``; other
fences are examples that are not run. ``sh`` blocks run as they are, ``python`` blocks
through the PATH's python; the blocks of one page run in order in one bash process
(what one block exports or `cd`s into, the next sees). Pages run as a reader would:
from the folder `make serve` runs in (its `retarget-data` beside), with this test's
`.venv/bin` first on PATH and RETARGET_URL naming the test's service. README.md takes
its API key from `retarget-data/admin-key` itself; the other pages are given it in
RETARGET_API_KEY, as the README's quickstart leaves it.

The README's quickstart is also the names quickstart of issue #32: by names only (no id
anywhere), and the second run finds what the first made and succeeds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from retarget.client import RetargetClient
from tests.helpers import service_env

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = "<!-- runnable -->"
_BLOCK = re.compile(r"^<!-- runnable -->\n```(\w+)\n(.*?)^```$", re.M | re.S)
_PRINTS = re.compile(r"#\s*prints:\s*(.+?)\s*$", re.M)
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_MARK = "::retarget-docs-block {}::"


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str

    @property
    def prints(self) -> list[str]:
        return _PRINTS.findall(self.code)

    def as_shell(self) -> str:
        if self.lang == "sh":
            return self.code
        if self.lang == "python":
            return f"python - <<'RETARGET_DOCS_PY'\n{self.code}RETARGET_DOCS_PY\n"
        raise AssertionError(f"{self.page}:{self.line}: a runnable block must be sh or python")


def runnable_blocks(path: Path) -> list[Block]:
    text = path.read_text()
    blocks = [
        Block(
            page=path.relative_to(ROOT).as_posix(),
            line=text.count("\n", 0, m.start()) + 2,
            lang=m.group(1),
            code=m.group(2),
        )
        for m in _BLOCK.finditer(text)
    ]
    # a marker that is not followed by a fence would silently run nothing
    assert text.count(RUNNABLE) == len(blocks), f"{path}: a {RUNNABLE} marker without a fence"
    return blocks


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def script(blocks: list[Block]) -> str:
    parts = ["set -euo pipefail"]
    for i, block in enumerate(blocks):
        parts += [f"echo '{_MARK.format(i)}'", block.as_shell()]
    return "\n".join(parts) + "\n"


def run_page(blocks: list[Block], env: dict[str, str], cwd: Path) -> None:
    run = subprocess.run(
        ["bash", "-c", script(blocks)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    page = blocks[0].page
    assert run.returncode == 0, f"{page}: exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    outputs = re.split(r"^::retarget-docs-block \d+::$", run.stdout, flags=re.M)[1:]
    assert len(outputs) == len(blocks), run.stdout
    for block, out in zip(blocks, outputs, strict=True):
        for expected in block.prints:
            assert expected in out, (
                f"{block.page}:{block.line}: the block should print {expected!r}; it printed\n"
                f"{out}\n(stderr)\n{run.stderr}"
            )


def test_the_marked_blocks_are_found_and_checked() -> None:
    readme = runnable_blocks(ROOT / "README.md")
    assert len(readme) >= 5
    assert {b.lang for b in readme} == {"sh", "python"}
    assert sum(len(b.prints) for b in readme) >= 8
    # the quickstart names things; it never copies an id from one command to the next
    for block in readme:
        assert not _ID.search(block.code), f"README.md:{block.line} holds an id"
        assert "$DS" not in block.code and "--json" not in block.code
    # a marker must sit right above its fence, or its block is not run
    text = "\n".join(p.read_text() for p in pages())
    assert len(re.findall(r"^<!-- runnable -->$", text, re.M)) == sum(
        len(runnable_blocks(p)) for p in pages()
    )


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retarget.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_docs_commands_run_twice(server: tuple[str, Path], tmp_path: Path) -> None:
    base, data = server
    # the folder `make serve` ran in: its data beside, as `retarget-data`
    (tmp_path / "retarget-data").symlink_to(data)
    venv_bin = Path(sys.executable).parent
    assert (venv_bin / "retarget").exists(), f"no retarget command beside {sys.executable}"
    path = f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    readme_env = service_env(RETARGET_URL=base, PATH=path, COLUMNS="200")
    key = (data / "admin-key").read_text().strip()
    docs_env = {**readme_env, "RETARGET_API_KEY": key}

    runnable = [(p, runnable_blocks(p)) for p in pages()]
    runnable = [(p, blocks) for p, blocks in runnable if blocks]
    assert runnable[0][0].name == "README.md"
    folder = tmp_path / "quickstart"
    with RetargetClient(base, key) as rt:
        releases = []
        for _ in range(2):
            for page, blocks in runnable:
                run_page(blocks, readme_env if page.name == "README.md" else docs_env, tmp_path)
            releases.append(rt.releases.list(dataset_id="digits").count)
        # the second run asked for what the first made: no new release, nothing charged again
        assert releases[0] == releases[1] >= 3

        # what the two runs of the README left: one of each, as after the first
        models = rt.models.list(dataset_id="digits").data
        assert sorted(m.ref or "" for m in models) == ["digits/sigma-0.8@1", "digits/sigma-2@1"]
        assert rt.models.get("digits/sigma-2@champion").aliases == ["champion"]
        assert len(rt.models.aliases("digits/sigma-2").history) == 1
        deployments = {d.name: d for d in rt.deployments.list().data}
        assert {"prod", "champion", "prod-py"} <= set(deployments)
        assert deployments["champion"].follows == "digits/sigma-2@champion"
        assert (deployments["prod"].epsilon, deployments["prod"].delta) == (0.5, 1e-6)

        # tags through the CLI, on the version an alias names
        tag = ["models", "tag", "set", "digits/sigma-2@champion", "stage=prod", "reviewed"]
        tagged = _cli(tag, docs_env, folder)
        assert tagged.returncode == 0, tagged.stderr
        assert rt.models.get("digits/sigma-2@1").tags == {"reviewed": "", "stage": "prod"}

        # a version whose own epsilon is over the following deployment's policy: the
        # alias moves, the deployment stays, and the CLI says so with exit 4
        rng = np.random.default_rng(3)
        weights = {"w": rng.standard_normal((10, 64), np.float32), "b": np.zeros(10, np.float32)}
        save_file(weights, str(folder / "hot.safetensors"))
        mech = {"type": "dp_sgd", "sampling_rate": 0.004, "clipping_norm": 1.0, "steps": 700}
        mech |= {"learning_rate": 0.1, "optimizer": "sgd", "noise_multiplier": 0.3}
        rt.models.register(
            folder / "hot.safetensors",
            dataset_id="digits",
            name="sigma-2",
            mechanism=mech,
            version=2,
        )
        before = rt.deployments.get("champion").current_release_id
        moved = _cli(["models", "alias", "set", "digits/sigma-2@2", "champion"], docs_env, folder)
        assert moved.returncode == 4, moved.stdout + moved.stderr
        assert "deployment champion stays on its current model" in moved.stderr
        assert rt.deployments.get("champion").current_release_id == before
        assert rt.models.get("digits/sigma-2@champion").version == 2

    typo = _cli(["models", "show", "digits/sigma-0.9"], docs_env, folder)
    assert typo.returncode == 4
    assert "did you mean 'digits/sigma-0.8'" in typo.stderr
    wrong_dataset = _cli(["models", "list", "--dataset", "digit"], docs_env, folder)
    assert wrong_dataset.returncode == 4 and "did you mean 'digits'" in wrong_dataset.stderr
    changed = _cli(
        ["datasets", "create", "digits", "--exist-ok", "--epsilon-cap", "3"], docs_env, folder
    )
    assert changed.returncode == 4 and "epsilon_cap" in changed.stderr
