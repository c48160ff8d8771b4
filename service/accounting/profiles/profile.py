"""Per-model privacy profiles: an RDP curve and a PLD (or a profile derived from RDP).

``compute_profile(mechanism)`` dispatches on the mechanism type through
``BUILDERS``. Every number a profile gives is an upper bound on the true
privacy loss of the mechanism (never optimistic); ``heuristic`` marks the one
exception the user opted into (shuffled batches accounted as Poisson).
"""

from __future__ import annotations

import base64
import math
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service import __version__
from service.accounting.conversions import (
    check_delta,
    check_epsilon,
    delta_from_rdp_grid,
)
from service.accounting.cost import CostLimits
from service.accounting.mechanisms import Mechanism, mechanism_hash
from service.accounting.pld.curves import EPS_GRID, DeltaCurves
from service.accounting.pld.pair import DEFAULT_DISCRETIZATION, PldPair
from service.accounting.profiles.builders import BUILDERS, _dp_sgd_groups
from service.accounting.rdp.profile import RDP_SAFETY, RdpProfile, rdp_upper_bound

__all__ = [
    "ACCOUNTANTS",
    "BUILDERS",
    "PROFILE_FORMAT",
    "RDP_SAFETY",
    "PrivacyProfile",
    "RdpProfile",
    "_dp_sgd_groups",
    "compute_profile",
    "rdp_upper_bound",
]

#: Bumped whenever what a profile holds or how it is computed changes, so a
#: cached profile from an older format is never mistaken for a current one.
PROFILE_FORMAT = 5

Accountant = Literal["rdp", "pld", "best"]
ACCOUNTANTS: tuple[str, ...] = ("rdp", "pld", "best")


def library_versions() -> dict[str, str]:
    return {
        "retarget": __version__,
        "dp_accounting": metadata.version("dp-accounting"),
        "numpy": np.__version__,
        "format": str(PROFILE_FORMAT),
    }


@dataclass(frozen=True)
class PrivacyProfile:
    """What one mechanism costs: RDP, PLD, and how they were obtained."""

    mechanism_type: str
    mechanism_hash: str
    rdp: RdpProfile | None
    pld: PldPair | None
    non_private: bool = False
    heuristic: bool = False
    methods: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=library_versions)

    # -- queries ---------------------------------------------------------------

    def epsilon(self, delta: float, accountant: Accountant = "best") -> float:
        """Smallest epsilon this profile proves at ``delta`` (inf if none); each
        (delta, accountant) is computed once per profile object."""
        check_delta(delta)
        _check_accountant(accountant)
        key = (float(delta), accountant)
        if key not in self._epsilons:
            self._epsilons[key] = self._epsilon(delta, accountant)
        return self._epsilons[key]

    @cached_property
    def _epsilons(self) -> dict[tuple[float, str], float]:
        return {}

    def _epsilon(self, delta: float, accountant: Accountant) -> float:
        if self.non_private:
            return math.inf
        rdp_eps = self.rdp.epsilon(delta) if self.rdp is not None else math.inf
        if accountant == "rdp":
            return rdp_eps
        pld_eps = self.pld.epsilon(delta) if self.pld is not None else rdp_eps
        return pld_eps if accountant == "pld" else min(pld_eps, rdp_eps)

    def delta(self, epsilon: float, accountant: Accountant = "best") -> float:
        """Smallest delta this profile proves at ``epsilon``."""
        check_epsilon(epsilon)
        _check_accountant(accountant)
        if self.non_private:
            return 1.0
        rdp_delta = self.rdp.delta(epsilon) if self.rdp is not None else 1.0
        if accountant == "rdp":
            return rdp_delta
        pld_delta = self.pld.delta(epsilon) if self.pld is not None else rdp_delta
        return pld_delta if accountant == "pld" else min(pld_delta, rdp_delta)

    def delta_directions(self, epsilon: float) -> tuple[float, float]:
        """(H(P||Q), H(Q||P)) at e^epsilon, each an upper bound; equal when RDP-derived."""
        check_epsilon(epsilon)
        if self.non_private:
            return 1.0, 1.0
        if self.pld is not None:
            return self.pld.delta_remove(epsilon), self.pld.delta_add(epsilon)
        d = self.rdp.delta(epsilon) if self.rdp is not None else 1.0
        return d, d

    @cached_property
    def curves(self) -> DeltaCurves:
        """Both hockey-stick curves tabulated on EPS_GRID (upper bounds)."""
        if self.non_private:
            ones = np.ones_like(EPS_GRID)
            return DeltaCurves(ones, ones)
        if self.pld is not None:
            # The suffix sums of ``PmfDelta`` (O(log n) per point, with their rounding
            # margin); a further 1e-12 relative keeps the table above direct queries.
            remove, add = self.pld.deltas(EPS_GRID)
            return DeltaCurves(
                np.minimum(1.0, remove * (1 + 1e-12)), np.minimum(1.0, add * (1 + 1e-12))
            )
        if self.rdp is None:
            ones = np.ones_like(EPS_GRID)
            return DeltaCurves(ones, ones)
        both = delta_from_rdp_grid(self.rdp.orders, self.rdp.epsilons, EPS_GRID)
        return DeltaCurves(both, both)

    def rdp_at(self, orders: ArrayLike) -> NDArray[np.float64]:
        if self.rdp is None or self.non_private:
            return np.full(np.atleast_1d(np.asarray(orders)).shape, np.inf)
        return self.rdp.at(orders)

    # -- serialisation -----------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "mechanism_type": self.mechanism_type,
            "mechanism_hash": self.mechanism_hash,
            "rdp": None if self.rdp is None else self.rdp.to_json(),
            "pld": None if self.pld is None else self.pld.to_json(),
            "curves": {
                "remove": _pack(self.curves.remove),
                "add": _pack(self.curves.add),
            },
            "non_private": self.non_private,
            "heuristic": self.heuristic,
            "methods": self.methods,
            "notes": list(self.notes),
            "parameters": self.parameters,
            "versions": self.versions,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PrivacyProfile:
        rdp = data.get("rdp")
        profile = cls(
            mechanism_type=data["mechanism_type"],
            mechanism_hash=data["mechanism_hash"],
            rdp=None if rdp is None else RdpProfile.from_json(rdp),
            pld=None if data.get("pld") is None else PldPair.from_json(data["pld"]),
            non_private=bool(data.get("non_private", False)),
            heuristic=bool(data.get("heuristic", False)),
            methods=dict(data.get("methods", {})),
            notes=tuple(data.get("notes", ())),
            parameters=dict(data.get("parameters", {})),
            versions=dict(data.get("versions", {})),
        )
        curves = data.get("curves")
        if curves is not None:
            # cached_property stores in __dict__, which a frozen dataclass allows.
            profile.__dict__["curves"] = DeltaCurves(
                _unpack(curves["remove"]), _unpack(curves["add"])
            )
        return profile


def _pack(values: NDArray) -> str:
    return base64.b64encode(zlib.compress(np.asarray(values, "<f8").tobytes(), 6)).decode()


def _unpack(text: str) -> NDArray[np.float64]:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), "<f8").astype(np.float64)


def _json_float(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def _check_accountant(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")


def compute_profile(
    mechanism: Mechanism,
    *,
    discretization: float = DEFAULT_DISCRETIZATION,
    limits: CostLimits | None = None,
) -> PrivacyProfile:
    """The privacy profile of ``mechanism`` (every bound an upper bound).

    A PLD whose estimated cost (``service.accounting.cost``) is over ``limits``
    is left out, with a note: queries then use the RDP curve.
    """
    if not 0 < discretization <= 0.1:
        raise ValueError(f"discretization must be in (0, 0.1], got {discretization}")
    built = BUILDERS[mechanism.type](mechanism, discretization, limits or CostLimits())
    # builders that refine the PLD's grid report the width they used
    parameters = {"discretization": discretization, **built.pop("parameters", {})}
    return PrivacyProfile(
        mechanism_type=mechanism.type,
        mechanism_hash=mechanism_hash(mechanism),
        rdp=built.pop("rdp"),
        pld=built.pop("pld"),
        non_private=built.pop("non_private", False),
        heuristic=built.pop("heuristic", False),
        methods=built.pop("methods"),
        notes=tuple(built.pop("notes", ())),
        parameters=parameters,
    )
