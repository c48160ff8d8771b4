"""Fuzz the whole API from its own OpenAPI document with schemathesis.

Three passes over every operation, each with valid (positive) and invalid
(negative) generated requests:

- ``admin``: an admin key. Goal: no response >= 500; every 4xx is problem+json.
- ``no key`` and ``bad key``: no Authorization header, and a well-formed key
  that does not exist. Goal: the same, every protected operation answers 401,
  and nothing changes: the database's rows and the blob folder are compared
  before and after.

    python -m benchmarks.fuzz_api                 # the long run: 60 cases per operation and mode
    python -m benchmarks.fuzz_api --examples 4    # what CI runs (tests/e2e/test_fuzz.py)

Without ``--base-url`` it starts ``retarget serve`` on its embedded defaults in a
temporary folder, registers a dataset with three models (so that ids in the
registry exist), and fuzzes that. Prints the counts and writes them to
``benchmarks/out/fuzz.json``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

#: Operations that need no API key (health, signed webhooks; /metrics needs the read scope).
OPEN = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("POST", "/v1/webhooks/policy-change"),
}
PROBLEM = "application/problem+json"


@dataclass
class PassResult:
    name: str
    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    by_operation: dict[str, Counter[int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "server_errors": sum(n for s, n in self.statuses.items() if s >= 500),
            "statuses": dict(sorted(self.statuses.items())),
            "failures": self.failures[:50],
            "by_operation": {k: dict(v) for k, v in sorted(self.by_operation.items())},
        }


def fuzz_pass(
    name: str,
    schema_doc: dict[str, Any],
    base_url: str,
    headers: dict[str, str],
    examples: int,
    expect_401: bool,
) -> PassResult:
    result = PassResult(name)
    schema = schemathesis.openapi.from_dict(schema_doc)

    def check(key: tuple[str, str], mode: GenerationMode, response: Any) -> None:
        result.cases += 1
        result.statuses[response.status_code] += 1
        result.by_operation.setdefault(f"{key[0]} {key[1]}", Counter())[response.status_code] += 1
        where = f"{key[0]} {key[1]} ({mode.value})"
        if response.status_code >= 500:
            result.failures.append(f"{where}: {response.status_code} {response.text[:200]}")
        elif response.status_code >= 400:
            ctype = response.headers.get("content-type") or ""
            ctype = ctype[0] if isinstance(ctype, list) else ctype
            if not ctype.startswith(PROBLEM):
                result.failures.append(f"{where}: {response.status_code} as {ctype!r}")
        if expect_401 and key not in OPEN and response.status_code not in (401, 404, 405):
            # 404/405: a path or method outside the route table never reaches auth
            result.failures.append(f"{where}: {response.status_code} without a valid key")

    def make_test(op: Any, mode: GenerationMode) -> Callable[[], None]:
        key = (op.method.upper(), op.path)

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.generate],
            derandomize=True,
        )
        @given(case=op.as_strategy(generation_mode=mode))
        def test(case: Any) -> None:
            check(key, mode, case.call(base_url=base_url, headers=headers, timeout=60))

        return test  # type: ignore[no-any-return]

    for op_result in schema.get_all_operations():
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            with suppress(Unsatisfiable):
                make_test(op_result.ok(), mode)()
    return result


def state_of(data_dir: Path) -> dict[str, Any]:
    """Row counts of every table and the blob folder's files: what a request may change."""
    db = sqlite3.connect(data_dir / "retarget.db")
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        counts = {t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    finally:
        db.close()
    blobs = sorted(
        str(p.relative_to(data_dir)) for p in (data_dir / "blobs").rglob("*") if p.is_file()
    )
    return {"rows": counts, "blobs": blobs}


def run_fuzz(
    base_url: str,
    admin_key: str,
    examples: int,
    data_dir: Path | None = None,
    progress: Callable[[str], None] = print,
) -> dict[str, Any]:
    import httpx2

    doc = httpx2.get(f"{base_url}/openapi.json", timeout=30).json()
    operations = sum(len(v) for v in doc["paths"].values())
    out: dict[str, Any] = {"operations": operations, "examples_per_mode": examples, "passes": {}}
    bad = {"Authorization": f"Bearer rt_{secrets.token_urlsafe(32)}"}
    for name, headers, unauth in (
        ("no key", {}, True),
        ("bad key", bad, True),
        ("admin", {"Authorization": f"Bearer {admin_key}"}, False),
    ):
        before = state_of(data_dir) if data_dir and unauth else None
        started = time.perf_counter()
        result = fuzz_pass(name, doc, base_url, headers, examples, expect_401=unauth)
        record = result.as_dict()
        record["seconds"] = round(time.perf_counter() - started, 1)
        if before is not None and data_dir is not None:
            after = state_of(data_dir)
            record["state_unchanged"] = after == before
            if after != before:
                result.failures.append(f"state changed without a valid key: {before} -> {after}")
                record["failures"] = result.failures[:50]
        out["passes"][name] = record
        progress(
            f"{name:8s} {record['cases']:6d} cases in {record['seconds']:6.1f} s, "
            f"{record['server_errors']} >= 500, {len(result.failures)} failure(s), "
            f"statuses {record['statuses']}"
        )
    out["total_cases"] = sum(p["cases"] for p in out["passes"].values())
    out["failures"] = sum(len(p["failures"]) for p in out["passes"].values())
    return out


@contextmanager
def local_service(folder: Path) -> Iterator[tuple[str, str, Path]]:
    """`retarget serve` on its embedded defaults with a small registry in it."""
    import httpx2

    from tests.helpers import checkpoint_bytes, free_port, service_env, sgd, wait_healthy

    port = free_port()
    env = service_env(RETARGET_DATA_DIR=str(folder / "data"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "retarget.cli",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(base):
            raise RuntimeError("retarget serve did not start")
        key = (folder / "data" / "admin-key").read_text().strip()
        with httpx2.Client(base_url=base, timeout=60) as http:
            http.headers["Authorization"] = f"Bearer {key}"
            ds = http.post("/v1/datasets", json={"name": "fuzz", "metric": "accuracy"}).json()
            for i, sigma in enumerate((0.8, 1.5, 3.0)):
                meta = {"dataset_id": ds["id"], "name": f"m{i}", "mechanism": sgd(sigma)}
                http.post(
                    "/v1/models",
                    files={"weights": ("m.safetensors", checkpoint_bytes(seed=i))},
                    data={"metadata": json.dumps(meta)},
                ).raise_for_status()
        yield base, key, folder / "data"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=60, help="cases per operation and mode")
    parser.add_argument("--base-url", default=None, help="fuzz a running service instead")
    parser.add_argument("--key", default=None, help="its admin key (with --base-url)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/fuzz.json"))
    args = parser.parse_args()
    if args.base_url:
        result = run_fuzz(args.base_url, args.key, args.examples)
    else:
        with tempfile.TemporaryDirectory() as tmp, local_service(Path(tmp)) as (base, key, data):
            result = run_fuzz(base, key, args.examples, data)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{result['total_cases']} cases over {result['operations']} operations, "
        f"{result['failures']} failure(s); wrote {args.out}"
    )
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
