"""Declared architectures: checked against the signature, run without uploaded code."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from service.errors import InvalidInput
from service.merging.architecture import Architecture, accuracy

MLP = {
    "input_shape": [64],
    "layers": [
        {"op": "flatten"},
        {"op": "linear", "weight": "1.weight", "bias": "1.bias"},
        {"op": "relu"},
        {"op": "linear", "weight": "3.weight", "bias": "3.bias"},
    ],
}


def torch_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))


def signature_of(module: nn.Module) -> dict:
    return {k: {"dtype": "F32", "shape": list(v.shape)} for k, v in module.state_dict().items()}


def test_declared_mlp_matches_the_torch_module_it_describes() -> None:
    module = torch_mlp()
    arch = Architecture.model_validate(MLP)
    assert arch.check(signature_of(module)) == 10
    x = torch.rand(32, 64)
    assert torch.allclose(arch.forward(module.state_dict(), x), module(x), atol=1e-6)


def test_accuracy_counts_argmax_hits() -> None:
    module = torch_mlp()
    arch = Architecture.model_validate(MLP)
    x = torch.rand(50, 64)
    labels = module(x).argmax(1)
    labels[:10] = (labels[:10] + 1) % 10
    assert accuracy(arch, module.state_dict(), x, labels, batch_size=7) == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.pop("3.bias"), "no tensor '3.bias'"),
        (lambda s: s.__setitem__("1.weight", {"dtype": "F32", "shape": [16, 65]}), "expected"),
        (lambda s: s.__setitem__("1.weight", {"dtype": "I64", "shape": [16, 64]}), "not a float"),
        (lambda s: s.__setitem__("3.weight", {"dtype": "F32", "shape": [1, 16]}), "expected [1]"),
    ],
)
def test_declaration_that_does_not_fit_the_checkpoint_is_refused(change, message) -> None:
    signature = signature_of(torch_mlp())
    change(signature)
    with pytest.raises(InvalidInput, match="architecture"):
        try:
            Architecture.model_validate(MLP).check(signature)
        except InvalidInput as exc:
            assert message in exc.detail
            raise


def test_unknown_layer_kinds_are_not_accepted() -> None:
    with pytest.raises(ValueError, match="op"):
        Architecture.model_validate({"input_shape": [4], "layers": [{"op": "exec", "code": "x"}]})
