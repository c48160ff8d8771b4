"""Random selection: one model drawn with the plan's probabilities, by a CSPRNG."""

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
