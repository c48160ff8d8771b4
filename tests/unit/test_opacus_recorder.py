"""The Opacus recorder: what it records from a real DPOptimizer, and that Opacus'
own accountant keeps counting as before."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset

from retarget.opacus import OpacusRecorder
from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile

N, FEATURES, BATCH = 256, 8, 32


def _private(
    optimizer_cls: type = torch.optim.SGD,
    clipping: str = "flat",
    max_grad_norm: float | list[float] = 1.0,
    poisson: bool = True,
    **opt_kwargs: object,
) -> tuple:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(N, FEATURES, generator=gen)
    y = (x[:, 0] > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 2))
    optimizer = optimizer_cls(model.parameters(), **({"lr": 0.5} | opt_kwargs))
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = engine.make_private(
            module=model,
            optimizer=optimizer,
            data_loader=DataLoader(TensorDataset(x, y), batch_size=BATCH),
            noise_multiplier=1.2,
            max_grad_norm=max_grad_norm,
            clipping=clipping,
            poisson_sampling=poisson,
        )
    return engine, model, optimizer, loader


def _train(model, optimizer, loader, epochs: int = 1, on_step=None) -> None:
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            if len(xb):
                loss_fn(model(xb), yb).backward()
            optimizer.step()
            if on_step is not None:
                on_step()


def test_the_recorder_keeps_opacus_accountant_and_records_every_step() -> None:
    engine, model, optimizer, loader = _private()
    recorder = OpacusRecorder.attach(optimizer, loader)
    _train(model, optimizer, loader, epochs=2)
    steps = len(recorder.steps)
    assert steps == 2 * len(loader)
    assert sum(n for _, _, n in engine.accountant.history) == steps  # Opacus still counts
    mech = recorder.mechanism()
    assert mech == {
        "type": "dp_sgd",
        "optimizer": "sgd",
        "sampling": "poisson",
        "steps": steps,
        "sampling_rate": loader.sample_rate,
        "noise_multiplier": 1.2,
        "clipping_norm": 1.0,
        "learning_rate": 0.5 / optimizer.expected_batch_size,
    }
    recorder.detach()
    assert optimizer.step_hook is not None and optimizer.step_hook != recorder._hook


def test_a_noise_change_mid_run_becomes_a_schedule() -> None:
    _, model, optimizer, loader = _private()
    recorder = OpacusRecorder.attach(optimizer, loader)
    _train(model, optimizer, loader)
    optimizer.noise_multiplier = 2.0
    for g in optimizer.param_groups:
        g["lr"] = 0.1
    _train(model, optimizer, loader)
    mech = recorder.mechanism()
    first, second = mech["schedule"]
    assert (first["noise_multiplier"], second["noise_multiplier"]) == (1.2, 2.0)
    assert first["steps"] == second["steps"] == len(loader)
    assert second["learning_rate"] == pytest.approx(0.1 / optimizer.expected_batch_size)


def test_per_layer_clipping_is_recorded_as_groups_with_the_same_noise() -> None:
    _, model, optimizer, loader = _private(clipping="per_layer", max_grad_norm=[1.0, 0.5])
    recorder = OpacusRecorder.attach(optimizer, loader)
    _train(model, optimizer, loader)
    mech = parse_mechanism(recorder.mechanism())
    (segment,) = mech.segments()  # type: ignore[union-attr]
    assert [g.clipping_norm for g in segment.groups] == [1.0, 0.5]
    # the whole step's noise multiplier is Opacus' sigma (noise sigma * ||C|| everywhere)
    assert segment.effective_noise_multiplier == pytest.approx(1.2)
    assert segment.total_clipping_norm == pytest.approx(math.sqrt(1.25))


@pytest.mark.parametrize(
    "cls, kwargs, expected",
    [
        (torch.optim.SGD, {"momentum": 0.9}, {"optimizer": "sgd_momentum", "momentum": 0.9}),
        (
            torch.optim.SGD,
            {"momentum": 0.9, "nesterov": True},
            {"optimizer": "sgd_momentum", "momentum": 0.9, "nesterov": True},
        ),
        (torch.optim.Adam, {"lr": 0.01}, {"optimizer": "adam"}),
    ],
)
def test_the_optimizer_is_recorded(cls: type, kwargs: dict, expected: dict) -> None:
    _, model, optimizer, loader = _private(cls, **kwargs)
    recorder = OpacusRecorder.attach(optimizer, loader)
    _train(model, optimizer, loader)
    mech = recorder.mechanism()
    assert {k: mech.get(k) for k in expected} == expected


def test_shuffled_batches_need_the_heuristic_accepted() -> None:
    _, model, optimizer, loader = _private(poisson=False)
    recorder = OpacusRecorder.attach(optimizer, loader)
    _train(model, optimizer, loader)
    with pytest.raises(ValueError, match="accept_poisson_approximation"):
        recorder.mechanism()
    recorder.accept_poisson_approximation = True
    assert compute_profile(parse_mechanism(recorder.mechanism())).heuristic


def test_our_epsilon_sits_between_the_optimistic_pld_and_opacus_rdp() -> None:
    from dp_accounting.pld import privacy_loss_distribution as pldlib

    engine, model, optimizer, loader = _private()
    recorder = OpacusRecorder.attach(optimizer, loader)
    _train(model, optimizer, loader, epochs=3)
    delta = 1e-5
    ours = compute_profile(parse_mechanism(recorder.mechanism())).epsilon(delta)
    opacus_rdp = engine.accountant.get_epsilon(delta)
    optimistic = (
        pldlib.from_gaussian_mechanism(
            1.2,
            sampling_prob=loader.sample_rate,
            pessimistic_estimate=False,
            value_discretization_interval=1e-4,
        )
        .self_compose(len(recorder.steps))
        .get_epsilon_for_delta(delta)
    )
    assert optimistic <= ours <= opacus_rdp, (optimistic, ours, opacus_rdp)
