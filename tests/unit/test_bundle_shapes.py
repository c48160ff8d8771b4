"""The shapes config.json determines, against the models transformers builds from it
(the oracle), and partial sharded checkpoints."""

from __future__ import annotations

import pytest

from service.errors import InvalidUpload
from service.formats.shapes import check_complete_shards, check_config_shapes, expected_shapes


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"num_key_value_heads": 1},  # grouped-query attention
        {"head_dim": 4, "num_attention_heads": 4, "num_key_value_heads": 2},  # explicit
    ],
)
def test_expected_shapes_agree_with_the_model_transformers_builds(extra: dict) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    sizes = {
        "vocab_size": 50,
        "hidden_size": 16,
        "intermediate_size": 24,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "max_position_embeddings": 32,
        "tie_word_embeddings": False,
    }
    config = LlamaConfig(**{**sizes, **extra})
    state = LlamaForCausalLM(config).state_dict()
    signature = {name: {"dtype": "F32", "shape": list(t.shape)} for name, t in state.items()}
    predicted = expected_shapes(config.to_dict(), signature)
    # every rule names a real tensor and gets its shape; the rules cover what they claim
    assert predicted, "no tensor covered"
    for name, shape in predicted.items():
        assert shape == signature[name]["shape"], name
    covered = {n.rsplit(".", 2)[-2] for n in predicted}
    assert covered >= {"embed_tokens", "lm_head", "q_proj", "k_proj", "v_proj", "o_proj"}
    assert covered >= {"gate_proj", "up_proj", "down_proj"}
    check_config_shapes(config.to_dict(), signature, {})  # a consistent model passes


def test_a_reshaped_tensor_is_refused_naming_it() -> None:
    config = {"vocab_size": 50, "hidden_size": 16, "num_attention_heads": 2}
    signature = {
        "model.embed_tokens.weight": {"dtype": "F32", "shape": [50, 16]},
        "model.layers.0.self_attn.q_proj.weight": {"dtype": "F32", "shape": [8, 32]},
    }
    with pytest.raises(InvalidUpload) as err:
        check_config_shapes(config, signature, {"model.layers.0.self_attn.q_proj.weight": "b.st"})
    assert (
        "q_proj" in str(err.value) and "[8, 32]" in str(err.value) and "[16, 16]" in str(err.value)
    )
    signature["model.embed_tokens.weight"]["shape"] = [51, 16]
    with pytest.raises(InvalidUpload, match="embed_tokens"):
        check_config_shapes(config, signature, {})


def test_sizes_the_config_does_not_state_check_nothing() -> None:
    signature = {"model.layers.0.self_attn.q_proj.weight": {"dtype": "F32", "shape": [8, 32]}}
    for config in ({}, {"hidden_size": "16"}, {"hidden_size": True}, [], None):
        check_config_shapes(config, signature, {})


@pytest.mark.parametrize(
    "paths",
    [
        ["model-00001-of-00004.safetensors"],
        ["model-00001-of-00002.safetensors", "config.json"],
        ["model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"],
        ["model-00000-of-00002.safetensors", "model-00001-of-00002.safetensors"],
    ],
)
def test_a_partial_checkpoint_is_refused(paths: list[str]) -> None:
    with pytest.raises(InvalidUpload, match="shard"):
        check_complete_shards(paths)


def test_complete_and_unsharded_checkpoints_pass() -> None:
    check_complete_shards(["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
    check_complete_shards(["model-00001-of-00001.safetensors"])
    check_complete_shards(["model.safetensors", "model-1.safetensors", "config.json"])
