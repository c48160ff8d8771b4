"""The privacy profile of a DpEvent tree that is not recognisably DP-SGD.

Source: dp_accounting's own accountants, for the add-or-remove-one relation:
``RDPAccountant`` (RDP of each event at the ORDERS grid, summed over compositions;
Mironov 2017, Mironov, Talwar, Zhang 2019) and ``PLDAccountant`` (pessimistic PMFs:
every delta an upper bound; Koskela et al. 2020, Doroshenko et al. 2022). The RDP
table gets the usual relative safety margin (``rdp.profile.safe``); orders between
grid points are bounded by the convexity chord. The PLD is built only when its
estimated grid is within the cost limits (``cost.dp_event_pld_points``) and it composes
at most ``MAX_PLD_COMPOSITIONS`` separate events (each a convolution); without it
every query uses the RDP curve (sound, looser). A tree neither accountant composes
never gets here: its registration is refused.

Trees that are compositions of Poisson-subsampled Gaussian steps take the dp_sgd
builder instead (``profiles.builders._dp_event``), so they get exactly the epsilon of
the equivalent dp_sgd record.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from service.accounting.conversions import ORDERS
from service.accounting.cost import (
    MAX_PLD_COMPOSITIONS,
    CostLimits,
    ProfileCost,
    dp_event_pld_points,
    exceeds,
)
from service.accounting.mechanisms import DPEvent
from service.accounting.mechanisms.dp_accounting_events import (
    pld_accountant,
    rdp_accountant,
    supported,
    to_dp_accounting,
    unsupported_reason,
)
from service.accounting.pld.pair import PldPair
from service.accounting.rdp.profile import RdpProfile, safe


def dp_event_parts(mech: DPEvent, discretization: float, limits: CostLimits) -> dict[str, Any]:
    if mech.non_private:
        return {
            "rdp": None,
            "pld": None,
            "non_private": True,
            "notes": ["the event tree holds a NonPrivateDpEvent: no privacy guarantee"],
            "methods": {"rdp": "none", "pld": "none"},
        }
    event = to_dp_accounting(mech.event)
    can = supported(mech)
    if not can["rdp"] and not can["pld"]:
        raise ValueError(unsupported_reason(mech))
    notes: list[str] = []
    rdp = None
    if can["rdp"]:
        accountant = rdp_accountant(ORDERS)
        accountant.compose(event)
        # dp_accounting keeps the composed curve in `_rdp` (no public getter in 0.6.0)
        values = np.nan_to_num(np.asarray(accountant._rdp, dtype=np.float64), nan=np.inf)
        rdp = RdpProfile(ORDERS, safe(values))
    else:
        notes.append("dp_accounting's RDP accountant does not compose this tree: PLD only")
    pld = None
    if can["pld"]:
        curve = rdp.epsilons if rdp is not None else np.full(ORDERS.shape, np.inf)
        compositions = sum(leaf.count for leaf in mech.leaves())
        cost = ProfileCost(
            0, dp_event_pld_points(mech, ORDERS, curve, discretization), compositions
        )
        over = exceeds(cost, limits)
        leaves = sum(1 for _ in mech.leaves())
        if leaves > MAX_PLD_COMPOSITIONS:
            over = [f"{leaves} events to compose, over the limit of {MAX_PLD_COMPOSITIONS}"]
        if over:
            notes.append(f"no PLD: {over[0]}; the RDP curve is used instead (sound, looser)")
        else:
            accountant = pld_accountant(discretization)
            accountant.compose(event)
            pld = PldPair.from_pld(accountant._pld)  # the composed PLD (no public getter)
    else:
        notes.append(
            "dp_accounting's PLD accountant does not compose this tree: the PLD accountant "
            "uses the privacy profile derived from RDP"
        )
    return {
        "rdp": rdp,
        "pld": pld,
        "notes": notes,
        "methods": {
            "rdp": "dp_accounting RDPAccountant (add or remove one), ORDERS grid, chord between"
            if rdp is not None
            else "none",
            "pld": "dp_accounting PLDAccountant (add or remove one), pessimistic"
            if pld is not None
            else "derived from RDP",
        },
        "parameters": {"leaves": sum(1 for _ in mech.leaves())},
    }
