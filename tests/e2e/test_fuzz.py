"""The short fuzz CI runs (benchmarks/fuzz_api.py runs the long one): schemathesis
cases from the service's own OpenAPI document against a real `retarget serve`."""

from __future__ import annotations

from pathlib import Path

from benchmarks.fuzz_api import local_service, run_fuzz


def test_short_fuzz_finds_no_server_error_and_no_unauthenticated_change(
    tmp_path: Path,
) -> None:
    with local_service(tmp_path) as (base, key, data_dir):
        result = run_fuzz(base, key, examples=4, data_dir=data_dir, progress=lambda _: None)
    assert result["operations"] >= 25
    assert result["total_cases"] >= 500
    for name, p in result["passes"].items():
        assert p["server_errors"] == 0, (name, p["failures"])
        assert p["failures"] == [], (name, p["failures"])
    assert result["passes"]["no key"]["state_unchanged"]
    assert result["passes"]["bad key"]["state_unchanged"]
    # the admin pass reached the handlers, not only the gate
    admin = result["passes"]["admin"]["statuses"]
    assert admin.get(200, 0) + admin.get(201, 0) > 0
