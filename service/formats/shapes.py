"""Bundles that could not load: partial sharded checkpoints, and tensors whose shapes
contradict the bundle's ``config.json``.

A sharded Hugging Face checkpoint names its shards ``<stem>-00001-of-00004.safetensors``;
one such shard alone, or a set with shards missing, is part of a model that no loader
can build. Where ``config.json`` states the sizes a tensor's shape follows from, the
shape is checked: the token embedding and the output head (``vocab_size x
hidden_size``) for any model that declares both, and for Llama-like decoders
(``num_attention_heads``, optionally ``num_key_value_heads`` and ``head_dim``) each
layer's attention projections and MLP. Only what the configuration determines is
checked: a tensor the rules do not name passes, and a size the configuration does not
give as a positive integer is not used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from service.errors import InvalidUpload

CONFIG = "config.json"
_SHARD = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.safetensors$")
#: the token embedding's name in the common architectures
_EMBEDDINGS = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.weight$")


def check_complete_shards(paths: Iterable[str]) -> None:
    """Refuses a sharded checkpoint with shards missing (one shard sent alone included)."""
    groups: dict[tuple[str, int], set[int]] = {}
    for path in paths:
        m = _SHARD.match(path)
        if m is None:
            continue
        i, n = int(m["i"]), int(m["n"])
        if not 1 <= i <= n:
            raise InvalidUpload(f"{path!r}: shard {i} of {n} does not exist", path=path)
        groups.setdefault((m["stem"], n), set()).add(i)
    for (stem, n), have in sorted(groups.items()):
        missing = sorted(set(range(1, n + 1)) - have)
        if missing:
            names = [f"{stem}-{i:05d}-of-{n:05d}.safetensors" for i in missing[:5]]
            raise InvalidUpload(
                f"a partial checkpoint: {len(have)} of the {n} shards of {stem!r} were sent, "
                f"missing {names}{' ...' if len(missing) > 5 else ''}; register the whole "
                "model folder",
                path=f"{stem}-{min(have):05d}-of-{n:05d}.safetensors",
            )


def _size(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def expected_shapes(config: Any, names: Iterable[str]) -> dict[str, list[int]]:
    """The shape ``config`` determines for each tensor of ``names`` it covers."""
    if not isinstance(config, dict):
        return {}
    if isinstance(config.get("text_config"), dict):  # multimodal: the language model's
        config = {**config, **config["text_config"]}
    vocab, hidden = _size(config, "vocab_size"), _size(config, "hidden_size")
    heads = _size(config, "num_attention_heads")
    kv_heads = _size(config, "num_key_value_heads") or heads
    head_dim = _size(config, "head_dim")
    if head_dim is None and heads and hidden and hidden % heads == 0:
        head_dim = hidden // heads
    inter = _size(config, "intermediate_size")
    layers = _size(config, "num_hidden_layers")
    out: dict[str, list[int]] = {}
    for name in names:
        if vocab and hidden and (name.endswith(_EMBEDDINGS) or name == "lm_head.weight"):
            out[name] = [vocab, hidden]
            continue
        m = _LAYER.search(name)
        if m is None or not hidden:
            continue
        if layers is not None and int(m[1]) >= layers:
            raise InvalidUpload(
                f"tensor {name!r} is of layer {m[1]}, but {CONFIG} declares "
                f"num_hidden_layers={layers}",
                tensors=[name],
            )
        part = m[3]
        if heads and head_dim and kv_heads:
            attention = {
                "q_proj": [heads * head_dim, hidden],
                "k_proj": [kv_heads * head_dim, hidden],
                "v_proj": [kv_heads * head_dim, hidden],
                "o_proj": [hidden, heads * head_dim],
            }
            if m[2] == "self_attn" and part in attention:
                out[name] = attention[part]
        if inter and m[2] == "mlp":
            mlp = {"gate_proj": [inter, hidden], "up_proj": [inter, hidden]}
            mlp["down_proj"] = [hidden, inter]
            if part in mlp:
                out[name] = mlp[part]
    return out


def check_config_shapes(config: Any, signature: dict[str, Any], holder: dict[str, str]) -> None:
    """Refuses the first tensor whose shape differs from what ``config`` determines."""
    for name, shape in sorted(expected_shapes(config, signature).items()):
        actual = list(signature[name]["shape"])
        if actual != shape:
            raise InvalidUpload(
                f"tensor {name!r} in {holder.get(name, '?')} has shape {actual}, but "
                f"{CONFIG} makes it {shape}: a loader would refuse this checkpoint",
                path=holder.get(name),
                tensors=[name],
            )
