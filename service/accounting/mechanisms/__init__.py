"""Mechanism metadata: what trained a model, as frozen, validated records.

Every registered model carries one mechanism, a discriminated union on
``type``. The persisted kinds are append-only: the meaning of a stored
``type`` never changes; a new meaning gets a new ``type``.

Each mechanism has a *canonical form* (``canonical_mechanism``): one
spelling for every way of writing the same mechanism (a constant DP-SGD run,
a one-segment schedule and a per-step array of equal values are the same
run), serialised as sorted, compact JSON and hashed with sha256
(``mechanism_hash``). Equal mechanisms therefore share one privacy profile.

Pure pydantic: nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from service.accounting.mechanisms.dp_event import NODE_KINDS, DPEvent
from service.accounting.mechanisms.dp_sgd import DPSGD, ParamGroup, PerStep, Segment
from service.accounting.mechanisms.others import (
    BalancedIterationSubsampling,
    EpsilonDelta,
    Gaussian,
    NonPrivate,
    RDPCurve,
)
from service.accounting.mechanisms.splitting import ModelSplitting

Mechanism = Annotated[
    Gaussian
    | DPSGD
    | BalancedIterationSubsampling
    | RDPCurve
    | EpsilonDelta
    | NonPrivate
    | DPEvent
    | ModelSplitting,
    Field(discriminator="type"),
]

MECHANISM_TYPES: tuple[str, ...] = (
    "gaussian",
    "dp_sgd",
    "balanced_iteration_subsampling",
    "rdp_curve",
    "epsilon_delta",
    "non_private",
    "dp_event",
    "model_splitting",
)

_ADAPTER: TypeAdapter[Any] = TypeAdapter(Mechanism)


def parse_mechanism(data: Any) -> Mechanism:
    """Validate a mechanism given as a dict (parsed JSON).

    Raises pydantic's ``ValidationError``; each error names the field.
    """
    return _ADAPTER.validate_python(data)


def canonical_mechanism(mechanism: Mechanism) -> dict[str, Any]:
    """The one spelling of ``mechanism`` that is stored and hashed."""
    return mechanism.canonical()


def canonical_json(data: Any) -> str:
    """Sorted, compact JSON; NaN and infinities are refused."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def mechanism_hash(mechanism: Mechanism) -> str:
    """sha256 of the canonical JSON: equal mechanisms hash equal however written."""
    return hashlib.sha256(canonical_json(canonical_mechanism(mechanism)).encode()).hexdigest()


def error_messages(exc: ValidationError, prefix: str = "") -> list[dict[str, Any]]:
    """A pydantic error as ``[{field, message}]`` with dotted field paths.

    The unions' tags (``dp_sgd`` in ``dp_sgd.steps``, a DpEvent node's ``kind``) are
    dropped from the path and ``prefix`` put in front: ``mechanism.steps``.
    """
    tags = {*MECHANISM_TYPES, *NODE_KINDS}
    out = []
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        loc = [str(p) for p in err["loc"] if p not in tags]
        field = ".".join([prefix, *loc] if prefix else loc) or prefix
        out.append({"field": field, "message": err["msg"]})
    return out


__all__ = [
    "DPSGD",
    "MECHANISM_TYPES",
    "NODE_KINDS",
    "BalancedIterationSubsampling",
    "DPEvent",
    "EpsilonDelta",
    "Gaussian",
    "Mechanism",
    "ModelSplitting",
    "NonPrivate",
    "ParamGroup",
    "PerStep",
    "RDPCurve",
    "Segment",
    "canonical_json",
    "canonical_mechanism",
    "error_messages",
    "mechanism_hash",
    "parse_mechanism",
]
