"""The request body of ``POST /v1/models`` (one file, or a bundle's files): its
OpenAPI description and the parsing of its ``metadata`` part."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from service.accounting.mechanisms import error_messages
from service.api.schemas import ModelCreate
from service.errors import InvalidInput

UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["metadata"],
                    "properties": {
                        "weights": {
                            "type": "string",
                            "format": "binary",
                            "description": "The checkpoint, a safetensors file (or "
                            "metadata.weights_uri instead).",
                        },
                        "files": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "Instead of weights: a bundle's files, by path.",
                        },
                        "metadata": {
                            "type": "string",
                            "description": "JSON of the ModelCreate schema.",
                        },
                    },
                }
            }
        },
    }
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_metadata(raw: str | bytes) -> ModelCreate:
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"metadata is not valid JSON: {exc}") from exc
    try:
        return ModelCreate.model_validate(data)
    except ValidationError as exc:
        errs = error_messages(exc, prefix="metadata")
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errs[:5])
        raise InvalidInput(f"invalid metadata: {detail}", errors=errs) from exc
