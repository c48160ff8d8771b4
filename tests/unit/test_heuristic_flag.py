"""The heuristic flag (shuffled batches accounted as Poisson) reaches every output."""

from __future__ import annotations

from service.accounting.planning.types import Plan
from service.ledger.charges import LedgerBound
from service.releases.retarget import release_provenance


def _plan(heuristic: bool) -> Plan:
    return Plan(
        method="rs",
        accountant="pld",
        weights={"m1": 1.0},
        epsilon=1.0,
        delta=1e-5,
        objective="max_utility",  # type: ignore[arg-type]
        objective_value=None,
        expected_utility=None,
        bound="Theorem 5.2",
        heuristic=heuristic,
    )


def test_release_metadata_says_when_the_guarantee_is_heuristic() -> None:
    marked = release_provenance("r1", "d1", _plan(heuristic=True))
    assert marked["retarget.heuristic"] == "true"
    plain = release_provenance("r1", "d1", _plan(heuristic=False))
    assert "retarget.heuristic" not in plain


def test_ledger_bound_carries_the_flag() -> None:
    assert LedgerBound(1.0, 1e-5, "pld", ["m1"], ["m1"], heuristic=True).heuristic
    assert not LedgerBound(1.0, 1e-5, "pld", ["m1"], ["m1"]).heuristic
