"""Bundle paths, kinds and LoRA signatures (service.formats.bundles)."""

from __future__ import annotations

import pytest

from service.errors import InvalidUpload
from service.formats.bundles import bundle_kind, bundle_signature_hash, check_path, lora_scaling


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/etc/passwd",
        "../config.json",
        "a/../b.json",
        "a//b.json",
        "./x.json",
        "a\\b.json",
        "x.json\x00",
        ".hidden.json",
        "a/" * 9 + "x.json",
    ],
)
def test_paths_that_are_not_plain_and_relative_are_refused(path: str) -> None:
    with pytest.raises(InvalidUpload, match="relative path"):
        check_path(path)


@pytest.mark.parametrize("path", ["pytorch_model.bin", "model.pt", "x.pth", "opt.pkl", "a.ckpt"])
def test_pickle_formats_are_refused(path: str) -> None:
    with pytest.raises(InvalidUpload, match="pickle"):
        check_path(path)


def test_accepted_files_and_kinds() -> None:
    hf = [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.model",
        "chat_template.jinja",
        "README.md",
        "tokenizer/vocab.txt",
    ]
    assert bundle_kind(hf) == "hf_bundle"
    assert bundle_kind(["adapter_model.safetensors", "adapter_config.json"]) == "peft_lora"
    with pytest.raises(InvalidUpload, match=r"adapter_config\.json"):
        bundle_kind(["adapter_model.safetensors"])
    with pytest.raises(InvalidUpload, match=r"no \.safetensors"):
        bundle_kind(["config.json"])
    with pytest.raises(InvalidUpload, match="twice"):
        bundle_kind(["model.safetensors", "model.safetensors"])
    with pytest.raises(InvalidUpload, match="not a file a bundle holds"):
        bundle_kind(["model.safetensors", "docs/README.md"])


def test_lora_signatures_hash_alike_whatever_the_rank() -> None:
    def sig(r: int, out: int = 16) -> dict:
        return {
            "m.q_proj.lora_A.weight": {"dtype": "F32", "shape": [r, 16]},
            "m.q_proj.lora_B.weight": {"dtype": "F32", "shape": [out, r]},
        }

    assert bundle_signature_hash("peft_lora", sig(2)) == bundle_signature_hash("peft_lora", sig(8))
    assert bundle_signature_hash("peft_lora", sig(2)) != bundle_signature_hash(
        "peft_lora", sig(2, 8)
    )
    assert bundle_signature_hash("hf_bundle", sig(2)) != bundle_signature_hash("hf_bundle", sig(8))


def test_lora_scaling_follows_peft() -> None:
    assert lora_scaling({"r": 4, "lora_alpha": 8}) == 2.0
    assert lora_scaling({"r": 4, "lora_alpha": 8, "use_rslora": True}) == 4.0
