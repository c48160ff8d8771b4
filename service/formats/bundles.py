"""Model bundles: what a folder of files a serving stack loads may hold.

A bundle is a Hugging Face model folder (``hf_bundle``: one safetensors file, or
shards and a ``*.safetensors.index.json``, plus configuration and tokenizer
sidecars) or a PEFT LoRA adapter (``peft_lora``: ``adapter_model.safetensors`` and
``adapter_config.json``). Paths are relative, plain and checked here; pickles
(``.bin``, ``.pt``, ...) are refused, as for single files. A model card
(``README.md``) stays with its own model and is never merged.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

from service.accounting.mechanisms import canonical_json
from service.errors import InvalidUpload
from service.formats.shapes import check_complete_shards

KINDS = ("safetensors", "hf_bundle", "peft_lora")
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
MODEL_CARD = "README.md"
PRIVACY = "privacy.json"
INDEX_SUFFIX = ".safetensors.index.json"
#: the most files one bundle may hold (shards, sidecars; a 405B model has ~200).
#: The multipart parser keeps up to 1 MiB of each file part in memory before it
#: spills to disk, so this also bounds an upload's memory (1 GiB at worst).
MAX_FILES = 1024
#: the largest index or adapter configuration parsed (both are small JSON)
MAX_JSON_BYTES = 64 * 1024 * 1024

#: suffixes of pickle-based formats: code execution on load, refused
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib", ".npy", ".npz")
#: sidecars a bundle may carry beside its tensors: configuration, tokenizer files,
#: chat templates (``.model``: a SentencePiece protobuf, not a pickle)
SIDECAR_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken")
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
#: names Windows reserves for devices, whatever the extension or case (``CON.json``,
#: ``nul.safetensors``): such a file cannot be created or read back there
_RESERVED = re.compile(r"^(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?$", re.IGNORECASE)


def check_path(path: str) -> str:
    """The path as given when it is a plain relative path of an accepted file type."""
    parts = path.split("/")
    if (
        not path
        or len(path) > 512
        or len(parts) > 8
        or any(not _PART.match(p) or p in (".", "..") for p in parts)
    ):
        raise InvalidUpload(
            f"file path {path[:200]!r} is not a plain relative path (letters, digits, "
            "'.', '_', '-', folders separated by '/')",
            path=path[:200],
        )
    for part in parts:
        if _RESERVED.match(part):
            raise InvalidUpload(
                f"file path {path!r}: {part!r} is a device name on Windows (CON, PRN, AUX, "
                "NUL, COM0-9, LPT0-9, whatever the extension): the bundle could not be "
                "written there",
                path=path,
            )
        if part.endswith("."):
            raise InvalidUpload(
                f"file path {path!r}: {part!r} ends with a dot, which Windows drops, so it "
                "would name another file there",
                path=path,
            )
    lower = path.lower()
    if lower.endswith(PICKLE_SUFFIXES):
        raise InvalidUpload(
            f"{path!r} is a pickle-based format: pickles can run code, so only safetensors "
            "is accepted. Save with save_pretrained(..., safe_serialization=True)",
            path=path,
        )
    if not (lower.endswith((".safetensors", *SIDECAR_SUFFIXES)) or path == MODEL_CARD):
        raise InvalidUpload(
            f"{path!r} is not a file a bundle holds: safetensors weights, an index, JSON "
            "configuration, tokenizer files, a chat template or a README.md model card",
            path=path,
        )
    return path


def bundle_kind(paths: list[str]) -> str:
    """``peft_lora`` for an adapter folder, else ``hf_bundle``; refuses a folder without
    weights, duplicate paths and adapters missing their configuration."""
    if len(paths) > MAX_FILES:
        raise InvalidUpload(f"a bundle holds at most {MAX_FILES} files, got {len(paths)}")
    seen: set[str] = set()
    files: dict[str, str] = {}  # casefolded path -> the path as sent
    folders: dict[str, str] = {}  # casefolded folder -> a path under it
    for path in paths:
        check_path(path)
        if path in seen:
            raise InvalidUpload(f"file {path!r} is sent twice", path=path)
        seen.add(path)
        _refuse_case_collision(path, files, folders)
    if ADAPTER_WEIGHTS in seen or ADAPTER_CONFIG in seen:
        if not {ADAPTER_WEIGHTS, ADAPTER_CONFIG} <= seen:
            raise InvalidUpload(
                f"a PEFT adapter needs both {ADAPTER_WEIGHTS} and {ADAPTER_CONFIG} at its root"
            )
        others = [p for p in seen if p.endswith(".safetensors") and p != ADAPTER_WEIGHTS]
        if others:
            raise InvalidUpload(f"a PEFT adapter holds one weights file; also got {others}")
        return "peft_lora"
    if not any(p.endswith(".safetensors") for p in seen):
        raise InvalidUpload("the bundle holds no .safetensors file")
    check_complete_shards(seen)
    return "hf_bundle"


def _refuse_case_collision(path: str, files: dict[str, str], folders: dict[str, str]) -> None:
    """Refuses ``path`` when it names, ignoring case, a file or folder already seen:
    ``config.json`` and ``CONFIG.json`` are one file on macOS and Windows, and so are
    a file ``a.json`` and a folder ``A.JSON/``. Records ``path`` and its folders."""
    parts = path.casefold().split("/")
    key = "/".join(parts)
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts))]
    clash = files.get(key) or folders.get(key)
    clash = clash or next((files[p] for p in prefixes if p in files), None)
    if clash is not None:
        raise InvalidUpload(
            f"file {path!r} and {clash!r} name the same file or folder on a "
            "case-insensitive filesystem (macOS, Windows): rename one",
            path=path,
        )
    files[key] = path
    for prefix in prefixes:
        folders.setdefault(prefix, path)


def load_json(path: Path, name: str) -> Any:
    if path.stat().st_size > MAX_JSON_BYTES:
        raise InvalidUpload(f"{name} is larger than {MAX_JSON_BYTES} bytes", path=name)
    try:
        return json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidUpload(f"{name} is not valid JSON: {exc}", path=name) from exc


def index_shards(index: Any, index_path: str) -> dict[str, str]:
    """An index's ``weight_map`` (tensor -> shard path, relative to the bundle root)."""
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InvalidUpload(f"{index_path} has no weight_map", path=index_path)
    folder = PurePosixPath(index_path).parent
    out = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str):
            raise InvalidUpload(f"{index_path}: shard of {name!r} is not a path", path=index_path)
        out[str(name)] = str(folder / shard) if str(folder) != "." else shard
    return out


def lora_role(name: str) -> str | None:
    """'A' or 'B' for a LoRA factor's tensor (rank on dim 0 of A, dim 1 of B), else None."""
    if ".lora_A." in name or name.endswith((".lora_embedding_A", ".lora_A.weight")):
        return "A"
    if ".lora_B." in name or name.endswith((".lora_embedding_B", ".lora_B.weight")):
        return "B"
    return None


def lora_config(config: Any) -> dict[str, Any]:
    """A PEFT LoRA ``adapter_config.json`` the exact LC supports, checked."""
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise InvalidUpload(f"{ADAPTER_CONFIG}: peft_type must be 'LORA'", path=ADAPTER_CONFIG)
    r, alpha = config.get("r"), config.get("lora_alpha")
    if not isinstance(r, int) or isinstance(r, bool) or r <= 0:
        raise InvalidUpload(f"{ADAPTER_CONFIG}: r must be a positive integer", path=ADAPTER_CONFIG)
    if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not alpha > 0:
        raise InvalidUpload(
            f"{ADAPTER_CONFIG}: lora_alpha must be a positive number", path=ADAPTER_CONFIG
        )
    for key in ("use_dora", "lora_bias"):
        if config.get(key):
            raise InvalidUpload(f"{ADAPTER_CONFIG}: {key} adapters are not supported")
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key):
            raise InvalidUpload(
                f"{ADAPTER_CONFIG}: a per-module {key} is not supported; one r and lora_alpha"
            )
    return config


def lora_scaling(config: dict[str, Any]) -> float:
    """The factor PEFT applies to B A: lora_alpha / r (rsLoRA: lora_alpha / sqrt(r))."""
    r, alpha = float(config["r"]), float(config["lora_alpha"])
    return alpha / r**0.5 if config.get("use_rslora") else alpha / r


def check_lora_tensors(signature: dict[str, Any], r: int) -> None:
    """Every LoRA factor has its partner and the configured rank."""
    for name, entry in signature.items():
        role = lora_role(name)
        if role is None:
            continue
        shape = entry["shape"]
        rank = shape[0] if role == "A" else (shape[1] if len(shape) > 1 else None)
        if rank != r:
            raise InvalidUpload(
                f"{ADAPTER_WEIGHTS}: {name!r} has shape {shape}, not rank r={r}", tensors=[name]
            )


def bundle_signature_hash(kind: str, signature: dict[str, Any]) -> str:
    """What LC needs equal across bundles: the kind and the tensors' names, dtypes and
    shapes, a LoRA factor's rank left out (adapters of any ranks combine exactly)."""
    if kind == "peft_lora":
        signature = {
            name: {**entry, "shape": _rank_free(name, entry["shape"])}
            for name, entry in signature.items()
        }
    return hashlib.sha256(canonical_json({"kind": kind, "tensors": signature}).encode()).hexdigest()


def _rank_free(name: str, shape: list[int]) -> list[Any]:
    role = lora_role(name)
    out: list[Any] = list(shape)
    if role == "A" and out:
        out[0] = "r"
    elif role == "B" and len(out) > 1:
        out[1] = "r"
    return out


def is_sidecar(path: str) -> bool:
    """A file copied as is (identical across merged bundles): not weights, not an
    index, not the adapter configuration, not a model card."""
    return not (
        path.endswith((".safetensors", INDEX_SUFFIX))
        or path in (ADAPTER_CONFIG, MODEL_CARD, PRIVACY)
    )
