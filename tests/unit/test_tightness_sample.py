"""A sample of benchmarks/bench_tightness.py's suite: sound and within 1% of the best reference.

Sound: never below dp_accounting's optimistic PLD on a grid finer than ours. Tight:
at most 1.01 x the tightest reference (dp_accounting's pessimistic PLD on that grid,
its RDP accountant at the best order of its default grid; for balanced iteration
subsampling, the best valid RDP figure: the random-allocation package's exact
remove-direction RDP with the certified exact add-direction RDP, each direction at its
own best order; sound there means above the package's lower bound, where it has one; for
model splitting, the exact step RDP by quadrature, and sound means our step RDP is above it).
"""

from __future__ import annotations

import pytest

from benchmarks.bench_tightness import Case, measure, suite

#: Cheap members of the suite (per-group clipping is the constant family at the effective
#: noise multiplier: tests/unit/test_profiles.py checks that equality).
SAMPLE = {
    ("constant", "0.001/10.0/10", 1e-10),
    ("constant", "0.01/30.0/100", 1e-5),
    ("constant", "0.0001/50.0/1", 1e-10),
    ("constant", "0.2/3.0/50", 1e-3),
    ("gaussian", "1.0/1", 1e-5),
    ("gaussian", "3.0/10", 1e-6),
    ("gaussian", "100.0/1", 1e-3),
    ("schedule", "0.1/4.0/20+0.05/2.0/40", 1e-5),
    ("bis", "50/5/2.0/3", 1e-5),
    ("bis", "100/1/1.0/1", 1e-6),
    ("splitting", "2/1.5/1.0/0.3/20", 1e-5),
    ("splitting", "2/1.0/0.0/0.05/200", 1e-6),
}


def _key(case: Case) -> tuple[str, str, float]:
    m = case.mechanism
    if case.family == "bis":
        return case.family, "/".join(str(x) for x in case.bis or ()), case.delta
    if case.family == "splitting":
        return case.family, "/".join(str(x) for x in case.split or ()), case.delta
    if case.family == "gaussian":
        return case.family, f"{m['noise_multiplier']}/{m['count']}", case.delta
    if case.family == "per-group":
        return case.family, f"{m['sampling_rate']}/{m['steps']}", case.delta
    return case.family, "+".join(f"{q}/{s}/{n}" for q, s, n in case.steps), case.delta


CASES = [c for c in suite() if _key(c) in SAMPLE]


def test_the_sample_is_drawn_from_the_suite() -> None:
    assert len(suite()) >= 100
    assert {_key(c) for c in CASES} == SAMPLE


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, _key(c))))
def test_sound_and_within_one_percent_of_the_tightest_reference(case: Case) -> None:
    row = measure(case)
    assert row["sound"], row
    assert row["ratio"] <= 1.01, row
    if case.family == "bis":
        # below the package's own RDP figure, which is not a bound (its add-direction
        # formula falls below quadrature: tests/unit/test_bis_allocation.py)
        assert row["ours"] < row["package"], row
