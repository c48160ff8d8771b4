"""Tiny Hugging Face models and PEFT adapters built locally (nothing downloaded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

BASE = "tiny-llama-base"


def tiny_llama_config() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=False,
    )


def tiny_llama(folder: Path, seed: int, max_shard_size: str = "12KB") -> Path:
    """A tiny Llama saved as several safetensors shards, an index and sidecars."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_llama_config())
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, max_shard_size=max_shard_size)
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 32}))
    (folder / "README.md").write_text(f"# model {seed}\n")
    return folder


def tiny_lora(
    folder: Path, base: Path, seed: int, r: int, alpha: float, rslora: bool = False
) -> Path:
    """A LoRA adapter of the tiny Llama at ``base`` with random A and B."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(base)
    config = LoraConfig(
        r=r,
        lora_alpha=alpha,
        target_modules=["q_proj", "v_proj"],
        lora_dropout=0.0,
        use_rslora=rslora,
    )
    peft_model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.1)
    peft_model.save_pretrained(folder)
    config_path = folder / "adapter_config.json"
    data = json.loads(config_path.read_text())
    data["base_model_name_or_path"] = BASE  # the same name whatever the temporary folder
    config_path.write_text(json.dumps(data, indent=2))
    return folder


def bundle_parts(folder: Path) -> list[tuple[str, tuple[str, bytes, str]]]:
    """The ``files`` parts of a bundle upload: every file, named by its relative path."""
    return [
        ("files", (p.relative_to(folder).as_posix(), p.read_bytes(), "application/octet-stream"))
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]


def upload_bundle(client: Any, folder: Path, metadata: dict[str, Any]) -> Any:
    return client.post(
        "/v1/models", files=bundle_parts(folder), data={"metadata": json.dumps(metadata)}
    )
