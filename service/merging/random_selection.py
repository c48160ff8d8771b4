"""Random selection: one model drawn with the plan's probabilities.

``draw`` uses a fresh CSPRNG uniform; ``select`` inverts the plan's CDF at a given
uniform, which releases use with one secret uniform per dataset (common random
numbers, ``service.releases.retarget``): plans whose probabilities differ slightly then
select the same model."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence

from service.errors import InvalidInput
from service.formats.streams import iter_file
from service.merging.base import MergeInput, MergeMethod

_RNG = secrets.SystemRandom()


def draw(weights: Sequence[float]) -> int:
    """An index drawn with probability proportional to ``weights`` (operating-system CSPRNG)."""
    total = float(sum(weights))
    if total <= 0 or any(w < 0 for w in weights):
        raise InvalidInput(f"weights must be non-negative with a positive sum, got {weights}")
    u = _RNG.random() * total
    acc = 0.0
    last = 0
    for i, w in enumerate(weights):
        if w > 0:
            last = i
            acc += w
            if u < acc:
                return i
    return last


def select(weights: Sequence[float], u: float) -> int:
    """The index whose cumulative share of ``weights`` first exceeds ``u`` (inverse CDF).

    For u uniform on [0, 1) index i comes out with probability weights[i] / sum; two
    weight vectors whose cumulative sums differ by at most d give the same index
    unless u lies within d of one of their boundaries."""
    total = float(sum(weights))
    if total <= 0 or any(w < 0 for w in weights):
        raise InvalidInput(f"weights must be non-negative with a positive sum, got {weights}")
    if not 0.0 <= u < 1.0:
        raise InvalidInput(f"u must be in [0, 1), got {u}")
    acc = 0.0
    last = 0
    for i, w in enumerate(weights):
        if w > 0:
            last = i
            acc += w
            if u * total < acc:
                return i
    return last  # u * total rounded past the last boundary: the last positive weight


class RandomSelection(MergeMethod):
    """The released artifact is the drawn model's own file."""

    name = "random_selection"

    def chunks(
        self, inputs: list[MergeInput], provenance: dict[str, str] | None = None
    ) -> Iterator[bytes | memoryview]:
        """The drawn file byte for byte (its provenance is the release record's)."""
        chosen = inputs[draw([i.weight for i in inputs])]
        with chosen.path.open("rb") as fh:
            yield from iter_file(fh)
