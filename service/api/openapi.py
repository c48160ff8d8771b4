"""The OpenAPI document worth generating clients from, and the docs pages that show it.

FastAPI writes the document from the routes; this module adds what it cannot know:
the bearer key and each operation's scope, problem+json on every error answer,
the ``mechanism`` union (with examples) and the upload's ``metadata`` part as
``ModelCreate`` JSON, and binary download bodies. Swagger UI and ReDoc are served
from the files of the ``fastapi-offline`` package, so ``/docs`` works without
internet access.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from pydantic import TypeAdapter
from starlette.responses import HTMLResponse

from service.accounting.mechanisms import Mechanism
from service.api.schemas import ModelCreate

#: Where the docs pages take their scripts and styles (Swagger UI 5, ReDoc 2).
DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs-assets"

#: The tags, in the order the docs show them.
TAGS: list[dict[str, str]] = [
    {"name": "datasets", "description": "Datasets, their caps and validation splits"},
    {"name": "models", "description": "Register DP checkpoints; their epsilon at any delta"},
    {"name": "plans", "description": "Dry runs (cost no privacy): weights and guarantees"},
    {"name": "releases", "description": "Merged models released for a target; the ledger"},
    {"name": "deployments", "description": "Named policies that serve a current model"},
    {"name": "webhooks", "description": "Signed policy changes from other systems"},
    {"name": "jobs", "description": "Accounting and plan jobs"},
    {"name": "keys", "description": "API keys (admin)"},
    {
        "name": "hf",
        "description": "A Hugging Face Hub-compatible read endpoint: deployments and releases "
        "pulled by huggingface_hub, transformers, vLLM and TGI (HF_ENDPOINT=<service>/hf)",
    },
    {"name": "operations", "description": "Health, readiness and metrics"},
]

#: Answers any operation may give, documented on all of them.
GENERIC_PROBLEMS = {
    "400": "Malformed request (a body that does not parse)",
    "422": "Invalid input",
    "500": "Internal error (never with a stack trace)",
}
SECURED_PROBLEMS = {"401": "No valid API key", "403": "The key lacks the scope"}

#: One example of each mechanism type (the field names of the API).
MECHANISM_EXAMPLES: list[dict[str, Any]] = [
    {"type": "gaussian", "sensitivity": 1.0, "noise_std": 2.0, "count": 1},
    {
        "type": "dp_sgd",
        "sampling": "poisson",
        "sampling_rate": 0.004,
        "noise_multiplier": 1.0,
        "clipping_norm": 1.0,
        "steps": 700,
        "learning_rate": 0.1,
        "optimizer": "sgd",
    },
    {
        "type": "balanced_iteration_subsampling",
        "iterations": 1000,
        "participations": 10,
        "noise_multiplier": 2.7,
        "clipping_norm": 1.0,
        "epochs": 1,
    },
    {
        "type": "model_splitting",
        "parts": 3,
        "noise_multiplier": 2.72,
        "clipping_norm": 1.0,
        "shared_clipping_norm": 1.0,
        "sampling_rate": 0.1,
        "steps": 1000,
    },
    {"type": "rdp_curve", "orders": [2, 4, 8, 16], "epsilons": [0.1, 0.25, 0.6, 1.4]},
    {"type": "epsilon_delta", "epsilon": 3.0, "delta": 1e-6},
    {"type": "non_private"},
    {
        "type": "dp_event",
        "event": {
            "kind": "SelfComposedDpEvent",
            "count": 100,
            "event": {
                "kind": "PoissonSampledDpEvent",
                "sampling_probability": 0.01,
                "event": {"kind": "GaussianDpEvent", "noise_multiplier": 1.1},
            },
        },
    },
]

BINARY = {"type": "string", "format": "binary"}
REF = "#/components/schemas/{model}"


def _component_schemas() -> dict[str, Any]:
    """``Mechanism`` (the discriminated union) and ``ModelCreate`` with what they use."""
    mechanism = TypeAdapter(Mechanism).json_schema(ref_template=REF)
    model_create = ModelCreate.model_json_schema(ref_template=REF)
    out: dict[str, Any] = {**mechanism.pop("$defs", {}), **model_create.pop("$defs", {})}
    mechanism["title"] = "Mechanism"
    mechanism["description"] = (
        "What trained a model, a discriminated union on `type`. Persisted types are "
        "append-only: a stored type never changes meaning."
    )
    mechanism["examples"] = MECHANISM_EXAMPLES
    out["Mechanism"] = mechanism
    model_create["properties"]["mechanism"] = {"$ref": REF.format(model="Mechanism")}
    out["ModelCreate"] = model_create
    return out


def _document_problems(schema: dict[str, Any]) -> None:
    """Every error answer is problem+json, whatever FastAPI's defaults say."""
    problem = {"$ref": "#/components/schemas/Problem"}
    for ops in schema["paths"].values():
        for op in ops.values():
            responses = op.setdefault("responses", {})
            extra = dict(GENERIC_PROBLEMS)
            if "security" in op:
                extra.update(SECURED_PROBLEMS)
            for code, text in extra.items():
                responses.setdefault(code, {"description": text})
            for code, resp in responses.items():
                if str(code).startswith(("4", "5")):
                    resp["content"] = {"application/problem+json": {"schema": problem}}


def _document_bodies(schema: dict[str, Any]) -> None:
    """Downloads are binary; the upload's ``metadata`` part is ModelCreate JSON; a
    model's ``mechanism`` is the Mechanism union."""
    components = schema["components"]["schemas"]
    for name, value in _component_schemas().items():
        components.setdefault(name, value)
    components["Mechanism"] = _component_schemas()["Mechanism"]
    for key in ("ModelPublic",):
        components[key]["properties"]["mechanism"] = {"$ref": REF.format(model="Mechanism")}
    for ops in schema["paths"].values():
        for op in ops.values():
            for code in ("200", "206"):
                content = op.get("responses", {}).get(code, {}).get("content", {})
                if "application/octet-stream" in content:
                    content["application/octet-stream"] = {"schema": BINARY}
    upload = schema["paths"]["/v1/models"]["post"]["requestBody"]["content"]
    form = upload["multipart/form-data"]
    form["schema"]["properties"]["metadata"] = {
        "$ref": REF.format(model="ModelCreate"),
        "description": "the model's metadata, a JSON document (ModelCreate)",
    }
    form["encoding"] = {"metadata": {"contentType": "application/json"}}


def install_document(
    app: FastAPI,
    routes: Callable[[], list[APIRoute]],
    scope_of: Callable[[APIRoute], str | None],
) -> None:
    """Replace ``app.openapi`` by the document described in the module docstring."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = base()
        schema["tags"] = TAGS
        schema.setdefault("components", {})["securitySchemes"] = {
            "ApiKey": {"type": "http", "scheme": "bearer", "description": "an API key"}
        }
        for route in routes():
            scope = scope_of(route)
            if scope is None:
                continue
            for method in route.methods or ():
                op = schema["paths"].get(route.path_format, {}).get(method.lower())
                if op is not None:
                    op["security"] = [{"ApiKey": []}]
                    op["x-required-scope"] = scope
        _document_problems(schema)
        _document_bodies(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def install_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` from packaged files, no CDN."""
    app.mount(ASSETS_URL, StaticFiles(directory=str(DOCS_ASSETS)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
