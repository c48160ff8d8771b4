"""dp_accounting ``DpEvent`` trees as mechanism records (``type: "dp_event"``).

A trainer that already describes its mechanism as a ``DpEvent`` registers it as
JSON: each node is an object whose ``kind`` is the dp_accounting class name and
whose other keys are that class's fields, nested events under their field names:

    {"type": "dp_event", "event": {"kind": "SelfComposedDpEvent", "count": 100,
     "event": {"kind": "PoissonSampledDpEvent", "sampling_probability": 0.01,
               "event": {"kind": "GaussianDpEvent", "noise_multiplier": 1.1}}}}

Only the kinds of ``NODE_KINDS`` parse, each a record of our own with validated
fields (an allow-list: no name from the payload is ever looked up or imported).
The tree is bounded before it is validated: at most ``MAX_DEPTH`` levels and
``MAX_NODES`` nodes, and the compositions it stands for (the product of the
``count`` fields along a path) at most ``MAX_COMPOSITIONS``.

Pure pydantic: nothing here does I/O or accounting.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from service.accounting.mechanisms.dp_sgd import DPSGD, Segment
from service.accounting.mechanisms.records import PositiveFloat, Record

#: Deepest tree accepted (the DP-SGD shape is 3 levels deep).
MAX_DEPTH = 16
#: Most nodes in one tree (each leaf costs one accountant step).
MAX_NODES = 256
#: Largest ``count`` of one SelfComposedDpEvent, and of the compositions of one leaf (the
#: product of the counts above it): as many steps as a dp_sgd record may have.
MAX_COUNT = 10**9
MAX_COMPOSITIONS = MAX_COUNT

Probability = Annotated[float, Field(ge=0, le=1)]


class GaussianNode(Record):
    """The Gaussian mechanism; noise std over l2 sensitivity."""

    kind: Literal["GaussianDpEvent"]
    noise_multiplier: PositiveFloat


class LaplaceNode(Record):
    """The Laplace mechanism; noise scale over l1 sensitivity (pure 1 / multiplier DP)."""

    kind: Literal["LaplaceDpEvent"]
    noise_multiplier: PositiveFloat


class RandomizedResponseNode(Record):
    """k-ary randomized response: the true bucket with probability 1 - p."""

    kind: Literal["RandomizedResponseDpEvent"]
    noise_parameter: Probability
    num_buckets: Annotated[int, Field(ge=1, le=10**9)]


class NoOpNode(Record):
    kind: Literal["NoOpDpEvent"]


class NonPrivateNode(Record):
    kind: Literal["NonPrivateDpEvent"]


class PoissonSampledNode(Record):
    kind: Literal["PoissonSampledDpEvent"]
    sampling_probability: Probability
    event: Node


class SampledWithoutReplacementNode(Record):
    kind: Literal["SampledWithoutReplacementDpEvent"]
    source_dataset_size: Annotated[int, Field(ge=1, le=10**15)]
    sample_size: Annotated[int, Field(ge=0, le=10**15)]
    event: Node

    @model_validator(mode="after")
    def _sample_fits(self) -> SampledWithoutReplacementNode:
        if self.sample_size > self.source_dataset_size:
            raise ValueError(
                f"sample_size ({self.sample_size}) must be <= source_dataset_size "
                f"({self.source_dataset_size})"
            )
        return self


class SelfComposedNode(Record):
    kind: Literal["SelfComposedDpEvent"]
    count: Annotated[int, Field(ge=0, le=MAX_COUNT)]
    event: Node


class ComposedNode(Record):
    kind: Literal["ComposedDpEvent"]
    events: list[Node] = Field(max_length=MAX_NODES)


Node = Annotated[
    GaussianNode
    | LaplaceNode
    | RandomizedResponseNode
    | NoOpNode
    | NonPrivateNode
    | PoissonSampledNode
    | SampledWithoutReplacementNode
    | SelfComposedNode
    | ComposedNode,
    Field(discriminator="kind"),
]

#: The allow-list: every kind a payload may name.
NODE_KINDS: tuple[str, ...] = (
    "GaussianDpEvent",
    "LaplaceDpEvent",
    "RandomizedResponseDpEvent",
    "NoOpDpEvent",
    "NonPrivateDpEvent",
    "PoissonSampledDpEvent",
    "SampledWithoutReplacementDpEvent",
    "SelfComposedDpEvent",
    "ComposedDpEvent",
)

for _cls in (PoissonSampledNode, SampledWithoutReplacementNode, SelfComposedNode, ComposedNode):
    _cls.model_rebuild()


@dataclass(frozen=True)
class Leaf:
    """A mechanism node at the bottom of the tree, with what is above it: the
    sampling that wraps it (``poisson`` with rate ``q``, ``without_replacement``,
    or none: ``q`` = 1) and how many times it is composed."""

    node: GaussianNode | LaplaceNode | RandomizedResponseNode | NonPrivateNode
    sampling: Literal["none", "poisson", "without_replacement"]
    q: float
    count: int
    nested_sampling: bool = False


def _shape_problem(raw: Any) -> str | None:
    """Why a raw tree is too deep or too large (None: within bounds). Iterative and
    stops at the first excess, so a hostile payload costs at most MAX_NODES steps."""
    stack: list[tuple[Any, int]] = [(raw, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            return f"the event tree has more than {MAX_NODES} nodes"
        if depth > MAX_DEPTH:
            return f"the event tree is deeper than {MAX_DEPTH} levels"
        if not isinstance(node, dict):
            continue
        child = node.get("event")
        if child is not None:
            stack.append((child, depth + 1))
        children = node.get("events")
        if isinstance(children, list):
            if len(children) > MAX_NODES:
                return f"the event tree has more than {MAX_NODES} nodes"
            stack.extend((c, depth + 1) for c in children)
    return None


class DPEvent(Record):
    """A dp_accounting ``DpEvent`` tree (see the module docstring)."""

    type: Literal["dp_event"]
    event: Node

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        if isinstance(data, dict) and "event" in data:
            problem = _shape_problem(data["event"])
            if problem is not None:
                raise ValueError(problem)
        return data

    @model_validator(mode="after")
    def _bounded_compositions(self) -> DPEvent:
        for leaf in self.leaves():
            if leaf.count > MAX_COMPOSITIONS:
                raise ValueError(
                    f"a {leaf.node.kind} is composed {leaf.count} times, over the limit "
                    f"of {MAX_COMPOSITIONS}"
                )
        return self

    def leaves(self) -> Iterator[Leaf]:
        """Every mechanism leaf with its sampling and composition count (NoOp and
        zero-probability or zero-count branches left out: they release nothing)."""
        stack: list[tuple[Any, str, float, int, bool]] = [(self.event, "none", 1.0, 1, False)]
        while stack:
            node, sampling, q, count, nested = stack.pop()
            if count == 0 or isinstance(node, NoOpNode):
                continue
            if isinstance(node, SelfComposedNode):
                stack.append((node.event, sampling, q, count * node.count, nested))
            elif isinstance(node, ComposedNode):
                stack.extend((e, sampling, q, count, nested) for e in reversed(node.events))
            elif isinstance(node, PoissonSampledNode):
                if node.sampling_probability > 0:
                    inner = sampling != "none" or nested
                    stack.append((node.event, "poisson", node.sampling_probability, count, inner))
            elif isinstance(node, SampledWithoutReplacementNode):
                if node.sample_size > 0:
                    rate = node.sample_size / node.source_dataset_size
                    inner = sampling != "none" or nested
                    stack.append((node.event, "without_replacement", rate, count, inner))
            else:
                yield Leaf(node, sampling, q, count, nested)  # type: ignore[arg-type]

    @property
    def non_private(self) -> bool:
        return any(isinstance(leaf.node, NonPrivateNode) for leaf in self.leaves())

    def gaussian_steps(self) -> list[tuple[float, float, int]] | None:
        """(q, sigma, count) of each step when the tree is recognisably DP-SGD: a
        composition of Poisson-subsampled Gaussian steps (or plain Gaussian steps,
        q = 1), each sampling wrapping one GaussianDpEvent directly. None otherwise."""
        steps = []
        for leaf in self.leaves():
            if not isinstance(leaf.node, GaussianNode) or leaf.sampling == "without_replacement":
                return None
            if leaf.nested_sampling:
                return None
            steps.append((leaf.q, leaf.node.noise_multiplier, leaf.count))
        if not steps or not self._sampling_wraps_one_gaussian(self.event):
            return None
        return steps

    def _sampling_wraps_one_gaussian(self, node: Any) -> bool:
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, PoissonSampledNode) and not isinstance(n.event, GaussianNode):
                return False
            if isinstance(n, SelfComposedNode | PoissonSampledNode):
                stack.append(n.event)
            elif isinstance(n, ComposedNode):
                stack.extend(n.events)
        return True

    def as_dp_sgd(self) -> DPSGD | None:
        """The equivalent ``dp_sgd`` record of a recognisably DP-SGD tree (None otherwise).

        A DpEvent says nothing of the clipping norm or the learning rate: the record
        has clipping norm 1 (noise multipliers are relative to it, so every profile is
        the same) and no learning rate, so linear combination cannot merge its last
        step and bounds it by the joint release."""
        steps = self.gaussian_steps()
        if steps is None:
            return None
        schedule = [
            Segment(steps=c, sampling_rate=q, noise_multiplier=sigma, clipping_norm=1.0)
            for q, sigma, c in steps
        ]
        return DPSGD(type="dp_sgd", schedule=schedule)

    def canonical(self) -> dict[str, Any]:
        return {"type": self.type, "event": self.event.model_dump(mode="json")}
