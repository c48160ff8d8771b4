"""Our DpEvent records as dp_accounting's own ``DpEvent`` objects.

Each allow-listed ``kind`` maps to one constructor in ``CONSTRUCTORS``: the payload's
names are keys of that table, never looked up in dp_accounting's namespace.

Every Retarget profile bounds the add-or-remove-one neighbouring relation (Poisson
sampling includes or leaves out one example). dp_accounting defines randomized
response and sampling without replacement for replace-one neighbours only, where a
guarantee says nothing about adding or removing an example: trees holding them are
supported by neither accountant here, and their registration is refused
(``service.accounting.cost.refusal``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dp_accounting import dp_event
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

from service.accounting.mechanisms.dp_event import DPEvent

RELATION = NeighboringRelation.ADD_OR_REMOVE_ONE


def _gaussian(node: Any) -> dp_event.DpEvent:
    return dp_event.GaussianDpEvent(noise_multiplier=float(node.noise_multiplier))


def _laplace(node: Any) -> dp_event.DpEvent:
    return dp_event.LaplaceDpEvent(noise_multiplier=float(node.noise_multiplier))


def _randomized_response(node: Any) -> dp_event.DpEvent:
    return dp_event.RandomizedResponseDpEvent(
        noise_parameter=float(node.noise_parameter), num_buckets=int(node.num_buckets)
    )


def _no_op(node: Any) -> dp_event.DpEvent:
    return dp_event.NoOpDpEvent()


def _non_private(node: Any) -> dp_event.DpEvent:
    return dp_event.NonPrivateDpEvent()


def _poisson(node: Any) -> dp_event.DpEvent:
    return dp_event.PoissonSampledDpEvent(
        sampling_probability=float(node.sampling_probability), event=to_dp_accounting(node.event)
    )


def _without_replacement(node: Any) -> dp_event.DpEvent:
    return dp_event.SampledWithoutReplacementDpEvent(
        source_dataset_size=int(node.source_dataset_size),
        sample_size=int(node.sample_size),
        event=to_dp_accounting(node.event),
    )


def _self_composed(node: Any) -> dp_event.DpEvent:
    return dp_event.SelfComposedDpEvent(event=to_dp_accounting(node.event), count=int(node.count))


def _composed(node: Any) -> dp_event.DpEvent:
    return dp_event.ComposedDpEvent(events=[to_dp_accounting(e) for e in node.events])


CONSTRUCTORS: dict[str, Callable[[Any], dp_event.DpEvent]] = {
    "GaussianDpEvent": _gaussian,
    "LaplaceDpEvent": _laplace,
    "RandomizedResponseDpEvent": _randomized_response,
    "NoOpDpEvent": _no_op,
    "NonPrivateDpEvent": _non_private,
    "PoissonSampledDpEvent": _poisson,
    "SampledWithoutReplacementDpEvent": _without_replacement,
    "SelfComposedDpEvent": _self_composed,
    "ComposedDpEvent": _composed,
}


def to_dp_accounting(node: Any) -> dp_event.DpEvent:
    """dp_accounting's event for one validated node (the tree is at most MAX_DEPTH deep).
    A branch that releases nothing (``releases_nothing``) is a NoOpDpEvent: dp_accounting
    divides by zero on some of them (an empty composition under sampling)."""
    if releases_nothing(node):
        return dp_event.NoOpDpEvent()
    return CONSTRUCTORS[node.kind](node)


def releases_nothing(node: Any) -> bool:
    """Whether a node releases nothing whatever the data: a NoOp, an empty composition, a
    count of 0, a sampling probability or sample size of 0, or any of these nested."""
    kind = node.kind
    if kind == "NoOpDpEvent":
        return True
    if kind == "ComposedDpEvent":
        return all(releases_nothing(e) for e in node.events)
    if kind == "SelfComposedDpEvent":
        return node.count == 0 or releases_nothing(node.event)
    if kind == "PoissonSampledDpEvent":
        return node.sampling_probability == 0 or releases_nothing(node.event)
    if kind == "SampledWithoutReplacementDpEvent":
        return node.sample_size == 0 or releases_nothing(node.event)
    return False


def rdp_accountant(orders: Any) -> RdpAccountant:
    return RdpAccountant(orders=list(orders), neighboring_relation=RELATION)


def pld_accountant(discretization: float) -> PLDAccountant:
    return PLDAccountant(
        neighboring_relation=RELATION, value_discretization_interval=discretization
    )


def supported(mechanism: DPEvent) -> dict[str, bool]:
    """Which of dp_accounting's accountants can compose the tree (add-or-remove-one)."""
    event = to_dp_accounting(mechanism.event)
    return {
        "rdp": bool(rdp_accountant([2.0]).supports(event)),
        "pld": bool(pld_accountant(1e-2).supports(event)),
    }


def unsupported_reason(mechanism: DPEvent) -> str:
    kinds = sorted(
        {
            leaf.node.kind
            for leaf in mechanism.leaves()
            if leaf.node.kind == "RandomizedResponseDpEvent"
        }
        | ({"SampledWithoutReplacementDpEvent"} if _without_replacement_in(mechanism) else set())
    )
    why = (
        f"{', '.join(kinds)} is defined for replace-one neighbours only, and every Retarget "
        "profile bounds adding or removing one example"
        if kinds
        else "dp_accounting's RDP and PLD accountants compose neither this tree (a sampled "
        "event must wrap Gaussian steps, or one Gaussian or Laplace event for the PLD)"
    )
    return f"no accountant supports this DpEvent: {why}"


def _without_replacement_in(mechanism: DPEvent) -> bool:
    return any(leaf.sampling == "without_replacement" for leaf in mechanism.leaves())
