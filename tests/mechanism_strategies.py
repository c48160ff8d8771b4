"""Hypothesis strategies for mechanism records of every type, valid and not: the values
the schema accepts at its limits, just past them, and nonsense (wrong types, negative
numbers, NaN), nested dp_event trees included. Shared by the property tests and the
API fuzz of mechanisms."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: numbers at and around every limit the schema has
_ANY_FLOAT = st.one_of(
    st.floats(min_value=1e-12, max_value=1e6),
    st.sampled_from([0.0, -1.0, 1.0, 1e-300, 1e300, 2.0, float("nan"), float("inf")]),
)
_RATE = st.one_of(st.floats(min_value=1e-9, max_value=1.0), st.sampled_from([0.0, 1.0, 1.5]))
_SIGMA = st.one_of(
    st.floats(min_value=0.05, max_value=50.0), st.sampled_from([1e-4, 0.3, 1e4, 0.0, -2.0])
)
_STEPS = st.one_of(
    st.integers(min_value=1, max_value=2_000),
    st.sampled_from([0, -1, 10**6, 10**9, 10**9 + 1]),
)


def _dp_sgd_constant() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "type": st.just("dp_sgd"),
            "sampling_rate": _RATE,
            "noise_multiplier": _SIGMA,
            "clipping_norm": _ANY_FLOAT,
            "steps": _STEPS,
        },
        optional={
            "learning_rate": _ANY_FLOAT,
            "optimizer": st.sampled_from(["sgd", "adam", "sgd_momentum", "nope"]),
            "momentum": st.floats(min_value=-0.5, max_value=1.0),
            "sampling": st.sampled_from(["poisson", "shuffle"]),
        },
    )


def _segment() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "steps": _STEPS,
            "sampling_rate": _RATE,
            "noise_multiplier": _SIGMA,
            "clipping_norm": _ANY_FLOAT,
        },
        optional={"learning_rate": _ANY_FLOAT},
    )


def _dp_sgd_schedule() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"type": st.just("dp_sgd"), "schedule": st.lists(_segment(), min_size=0, max_size=6)}
    )


def _dp_sgd_per_step() -> st.SearchStrategy[dict[str, Any]]:
    column = st.one_of(_SIGMA, st.lists(_SIGMA, min_size=0, max_size=40))
    return st.fixed_dictionaries(
        {
            "type": st.just("dp_sgd"),
            "per_step": st.fixed_dictionaries(
                {"sampling_rate": _RATE, "noise_multiplier": column, "clipping_norm": column}
            ),
        }
    )


def _gaussian() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"type": st.just("gaussian"), "sensitivity": _ANY_FLOAT},
        optional={
            "noise_std": _ANY_FLOAT,
            "noise_multiplier": _SIGMA,
            "count": _STEPS,
            "adaptive": st.booleans(),
            "additive": st.booleans(),
        },
    )


def _bis() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "type": st.just("balanced_iteration_subsampling"),
            "iterations": _STEPS,
            "participations": _STEPS,
            "noise_multiplier": _SIGMA,
            "clipping_norm": _ANY_FLOAT,
        },
        optional={"epochs": _STEPS},
    )


def _model_splitting() -> st.SearchStrategy[dict[str, Any]]:
    parts = st.one_of(
        st.integers(min_value=1, max_value=12), st.sampled_from([0, 100_000, 100_001])
    )
    return st.fixed_dictionaries(
        {
            "type": st.just("model_splitting"),
            "parts": parts,
            "noise_multiplier": _SIGMA,
            "clipping_norm": _ANY_FLOAT,
            "steps": _STEPS,
        },
        optional={
            "parts_per_example": parts,
            "scheme": st.sampled_from(["disjoint", "dropout", "overlapping"]),
            "dropout_rate": st.sampled_from([0.5, 0.3, 0.0, 1.0]),
            "shared_clipping_norm": _ANY_FLOAT,
            "sampling_rate": _RATE,
            "learning_rate": _ANY_FLOAT,
        },
    )


def _rdp_curve() -> st.SearchStrategy[dict[str, Any]]:
    return st.integers(min_value=0, max_value=8).flatmap(
        lambda n: st.fixed_dictionaries(
            {
                "type": st.just("rdp_curve"),
                "orders": st.lists(
                    st.floats(min_value=0.5, max_value=2048.0), min_size=n, max_size=n
                ),
                "epsilons": st.lists(_ANY_FLOAT, min_size=n, max_size=n + 1),
            }
        )
    )


def _epsilon_delta() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"type": st.just("epsilon_delta"), "epsilon": _ANY_FLOAT, "delta": _RATE}
    )


def _leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.fixed_dictionaries({"kind": st.just("GaussianDpEvent"), "noise_multiplier": _SIGMA}),
        st.fixed_dictionaries({"kind": st.just("LaplaceDpEvent"), "noise_multiplier": _SIGMA}),
        st.just({"kind": "NoOpDpEvent"}),
        st.fixed_dictionaries(
            {
                "kind": st.just("RandomizedResponseDpEvent"),
                "noise_parameter": st.floats(min_value=0.0, max_value=1.0),
                "num_buckets": st.integers(min_value=0, max_value=100),
            }
        ),
    )


def _tree(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.fixed_dictionaries(
            {
                "kind": st.just("PoissonSampledDpEvent"),
                "sampling_probability": _RATE,
                "event": children,
            }
        ),
        st.fixed_dictionaries(
            {
                "kind": st.just("SelfComposedDpEvent"),
                "count": st.one_of(st.integers(0, 1000), st.sampled_from([10**9, -1])),
                "event": children,
            }
        ),
        st.fixed_dictionaries(
            {"kind": st.just("ComposedDpEvent"), "events": st.lists(children, max_size=3)}
        ),
        st.fixed_dictionaries(
            {
                "kind": st.just("SampledWithoutReplacementDpEvent"),
                "source_dataset_size": st.integers(0, 10_000),
                "sample_size": st.integers(0, 10_000),
                "event": children,
            }
        ),
    )


def _dp_event() -> st.SearchStrategy[dict[str, Any]]:
    trees = st.recursive(_leaf(), _tree, max_leaves=6)
    return st.fixed_dictionaries({"type": st.just("dp_event"), "event": trees})


def mechanisms() -> st.SearchStrategy[Any]:
    """Mechanism records of every type, and some that are not records at all."""
    return st.one_of(
        _dp_sgd_constant(),
        _dp_sgd_schedule(),
        _dp_sgd_per_step(),
        _gaussian(),
        _bis(),
        _model_splitting(),
        _rdp_curve(),
        _epsilon_delta(),
        st.just({"type": "non_private"}),
        _dp_event(),
        st.sampled_from([{}, {"type": "nope"}, [], "dp_sgd", None, {"type": "dp_sgd"}]),
    )
