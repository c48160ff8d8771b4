"""Displayed epsilons are rounded up, and an already short value stays itself."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from service.accounting.conversions import round_up


def test_short_decimals_are_shown_as_they_are() -> None:
    for value in (2.37, 0.1, 1.0, 3.5, 1e-5, 700.0):
        assert round_up(value) == value
    assert round_up(2.3700001) == 2.37001
    assert round_up(0.1 + 0.2) == 0.300001  # 0.30000000000000004 is above 0.3


@given(st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False))
def test_never_below_the_value(value: float) -> None:
    out = round_up(value)
    assert out >= value
    assert out <= value * (1 + 1e-5)  # six significant digits: one unit of the sixth at most
