"""The OpenAPI request body of ``POST /v1/models``: one file, or a bundle's files."""

from __future__ import annotations

from typing import Any

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
