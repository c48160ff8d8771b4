"""The benchmarks of issue #34 in their quick modes: each runs in seconds and checks its
results are right (not its speed), so the scripts cannot rot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def run(module: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in env.items() if not k.startswith("RETARGET_")}
    res = subprocess.run(
        [sys.executable, "-m", module, "--quick", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    return res.stdout


def test_bundle_merge_benchmark_matches_the_numpy_merge(tmp_path: Path) -> None:
    out = run("benchmarks.bench_bundles", "--dir", str(tmp_path))
    assert "largest difference from the numpy merge: 0 bf16 steps" in out
    assert "LC / copy:" in out and "peak anonymous memory" in out


def test_llm_benchmark_releases_through_the_api_what_numpy_merges(tmp_path: Path) -> None:
    """Registered from folders, released as one LC of all four, the archive's shards are
    the numpy merge of the inputs with the release's weights."""
    out = run("benchmarks.bench_llm_api", "--dir", str(tmp_path))
    assert "LC release of 4" in out
    assert "archive against the numpy merge: 0.0 bf16 steps apart at most" in out
    assert "peak anonymous memory, release" in out


def test_download_benchmark_checks_bytes_ranges_and_etags() -> None:
    out = run("benchmarks.bench_downloads")
    assert "| uvicorn (retarget serve), warm |" in out
    assert "| uvicorn (retarget serve), cold |" in out


def test_gpu_benchmark_checks_the_gpu_merge_or_says_unmeasured(tmp_path: Path) -> None:
    """Where a GPU is lent this is the device check: the GPU's LC within one bf16 step
    of the numpy merge, with its ratios; elsewhere the script exits cleanly."""
    out = run("benchmarks.bench_gpu_merge", "--dir", str(tmp_path))
    if torch.cuda.is_available():
        assert "ratio to H2D" in out
        assert "largest difference from the numpy merge" in out
    else:
        assert "no CUDA device" in out and "unmeasured" in out
