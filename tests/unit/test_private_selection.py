"""Private selection (report-noisy-max with Gumbel noise), against independent checks:
the sampler's empirical law against the exponential mechanism's closed form, the
privacy loss on neighbouring metric vectors (Monte Carlo and exact) against the
selection's epsilon, the composed certificate against an exact attack, and the plan's
refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from service.accounting.lc import accountant as lc
from service.accounting.mechanisms import parse_mechanism
from service.accounting.planning import Candidate, PlanRequestSpec, make_plan
from service.accounting.planning.private_selection import (
    gumbel_scale,
    noisy_argmax,
    selection_probabilities,
)
from service.accounting.profiles.profile import compute_profile
from service.errors import InfeasibleTarget, InvalidInput
from tests.helpers import sgd


def _draws(values: np.ndarray, scale: float, n: int, rng: np.random.Generator) -> np.ndarray:
    counts = np.zeros(len(values))
    for u in rng.random((n, len(values))):
        counts[noisy_argmax(values, scale, u)] += 1
    return counts / n


def test_gumbel_max_samples_the_exponential_mechanism() -> None:
    rng = np.random.default_rng(1)
    values = np.array([0.91, 0.90, 0.85, 0.60])
    scale = gumbel_scale(1 / 200, 0.5)  # accuracy on 200 examples, eps_sel 0.5
    freq = _draws(values, scale, 40_000, rng)
    exact = selection_probabilities(values, scale)
    # each frequency within 5 standard errors of the closed form
    se = np.sqrt(exact * (1 - exact) / 40_000)
    assert np.all(np.abs(freq - exact) <= 5 * se + 1e-12), (freq, exact)


@pytest.mark.parametrize("eps_sel", [0.1, 0.5, 2.0])
def test_selection_loss_on_neighbouring_metrics_stays_under_its_epsilon(eps_sel: float) -> None:
    """Worst neighbours for each output j: u_j moves by +Delta, every other by -Delta
    (accuracies of different models may move apart when one example changes)."""
    delta_u = 1 / 100
    scale = gumbel_scale(delta_u, eps_sel)
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(300):  # exact law, random and adversarial metric vectors
        u = rng.uniform(0, 1, size=rng.integers(2, 7))
        for j in range(len(u)):
            shifted = u - delta_u
            shifted[j] = u[j] + delta_u
            p, q = selection_probabilities(u, scale), selection_probabilities(shifted, scale)
            worst = max(worst, float(np.max(np.abs(np.log(q) - np.log(p)))))
    assert worst <= eps_sel * (1 + 1e-9)
    # Monte Carlo of the sampler itself on the worst pair of a close race
    u = np.array([0.80, 0.80 + 0.2 * delta_u, 0.79])
    shifted = u - delta_u
    shifted[0] = u[0] + delta_u
    n = 60_000
    a, b = _draws(u, scale, n, rng), _draws(shifted, scale, n, rng)
    for j in range(3):
        se = math.sqrt(1 / (a[j] * n) + 1 / (b[j] * n))  # delta method on log frequencies
        assert abs(math.log(b[j] / a[j])) <= eps_sel + 5 * se


def test_the_chosen_models_own_curve_plus_the_selection_would_be_optimistic() -> None:
    """Why the certificate is the joint release of the eligible models plus eps_sel, not
    the chosen model's curve plus eps_sel: two randomized-response models of one bit,
    each e-DP, selected by their own output (the metric reads the model). Exact law."""
    e, eps_sel = 1.0, 0.1
    p_true = math.exp(e) / (1 + math.exp(e))
    scale = gumbel_scale(1e-6, eps_sel)  # a tiny sensitivity: a near-deterministic argmax

    def law(bit: int) -> dict[tuple[int, int], float]:
        out: dict[tuple[int, int], float] = {}
        for thetas in itertools.product((0, 1), repeat=2):
            p = math.prod(p_true if t == bit else 1 - p_true for t in thetas)
            for i, q in enumerate(selection_probabilities(np.array(thetas, float), scale)):
                out[(i, thetas[i])] = out.get((i, thetas[i]), 0.0) + p * q
        return out

    zero, one = law(0), law(1)
    loss = max(abs(math.log(zero[k] / one[k])) for k in zero)
    assert loss > e + eps_sel + 0.5  # the pointwise-maximum composition is broken
    assert loss <= 2 * e + eps_sel  # joint release (2e) + selection holds


def _candidate(
    name: str, sigma: float, acc: float, sens: float | None = 0.01, source: str = "private"
) -> Candidate:
    m = parse_mechanism(sgd(sigma))
    return Candidate(
        name,
        m,
        compute_profile(m),
        {"acc": acc},
        name,
        None,
        "s",
        name=name,
        metric_sources={"acc": source},
        metric_sensitivities={} if sens is None else {"acc": sens},
    )


@pytest.fixture(scope="module")
def models() -> list[Candidate]:
    return [_candidate("s1", 1.0, 0.93), _candidate("s2", 2.0, 0.90), _candidate("s4", 4.0, 0.8)]


def _spec(target: float, **kw: object) -> PlanRequestSpec:
    return PlanRequestSpec(
        target, 1e-5, "rs", "best", "metric", "acc", "max", metric_source="private", **kw
    )  # type: ignore[arg-type]


def test_private_selection_certificate_is_the_eligible_joint_release_plus_the_selection(
    models: list[Candidate],
) -> None:
    alone = {c.id: c.profile.epsilon(1e-5, "pld") for c in models}
    target = sorted(alone.values())[1] * 1.6  # room for some models, not all
    plan = make_plan(models, _spec(target, selection_epsilon=0.2))
    assert plan.selection_epsilon == 0.2 and plan.weights == {}
    eligible = plan.selection["eligible"]  # type: ignore[index]
    assert 1 <= len(eligible) < len(models) and sorted(plan.exposed or []) == sorted(eligible)
    profiles = [c.profile for c in models if c.id in eligible]
    joint = min(lc.joint_epsilon(profiles, 1e-5, a) for a in ("rdp", "pld"))
    assert plan.epsilon == pytest.approx(joint + 0.2, rel=1e-9) and plan.epsilon <= target
    # a model left out could not have fitted the remaining budget with the others
    for c in models:
        if c.id not in eligible:
            more = [*profiles, c.profile]
            assert min(lc.joint_epsilon(more, 1e-5, a) for a in ("rdp", "pld")) > target - 0.2
    assert any("left out before selecting" in n for n in plan.notes)


def test_private_selection_refuses_what_it_cannot_certify(models: list[Candidate]) -> None:
    with pytest.raises(InvalidInput, match="sensitivity"):
        make_plan([*models, _candidate("x", 3.0, 0.9, sens=None)], _spec(50.0))
    with pytest.raises(InvalidInput, match=r"\[0, 1\]"):
        make_plan([*models, _candidate("x", 3.0, 1.7)], _spec(50.0))
    with pytest.raises(InvalidInput, match="declared 'models'"):
        make_plan([*models, _candidate("x", 3.0, 0.9, source="models")], _spec(50.0))
    with pytest.raises(InvalidInput, match="leaves nothing"):
        make_plan(models, _spec(1.0, selection_epsilon=1.0))
    with pytest.raises(InfeasibleTarget):
        make_plan(models, _spec(0.05))


def test_a_private_selection_release_carries_its_selection_epsilon(
    models: list[Candidate],
) -> None:
    """The release's provenance (safetensors metadata of merged files, a bundle's
    privacy.json) names the selection's epsilon beside the whole guarantee."""
    import json

    from service.releases.bundles import privacy_json
    from service.releases.retarget import release_provenance

    plan = make_plan(models, _spec(60.0, selection_epsilon=0.3))
    plan.weights = {plan.selection["eligible"][0]: 1.0}  # type: ignore[index]
    record = json.loads(privacy_json(release_provenance("r", "d", plan)))
    assert record["selection_epsilon"] == 0.3
    assert record["epsilon"] >= 0.3 + min(c.profile.epsilon(1e-5, "pld") for c in models)
