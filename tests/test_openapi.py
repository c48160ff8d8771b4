"""The committed OpenAPI document is what the app serves: regenerate with `retarget openapi`."""

from __future__ import annotations

from pathlib import Path

from service.cli import render_openapi
from service.registry.keys import SCOPES

COMMITTED = Path(__file__).resolve().parents[1] / "openapi" / "openapi.json"


def test_committed_openapi_document_is_current() -> None:
    assert COMMITTED.is_file(), "openapi/openapi.json is missing: run `retarget openapi`"
    assert COMMITTED.read_text() == render_openapi(), (
        "openapi/openapi.json is stale: run `retarget openapi`"
    )


def test_contract_paths_are_documented() -> None:
    import json

    paths = json.loads(render_openapi())["paths"]
    for path in (
        "/v1/datasets",
        "/v1/datasets/{dataset_id}",
        "/v1/models",
        "/v1/models/{model_id}",
        "/v1/models/{model_id}/weights",
        "/v1/releases/{release_id}/files",
        "/v1/releases/{release_id}/files/{path}",
        "/v1/releases/{release_id}/archive",
        "/v1/deployments/{name}/archive",
        "/healthz",
        "/readyz",
    ):
        assert path in paths
    upload = paths["/v1/models"]["post"]["requestBody"]["content"]
    schema = upload["multipart/form-data"]["schema"]
    assert set(schema["properties"]) == {"weights", "files", "metadata"}
    assert schema["required"] == ["metadata"]


def test_every_error_answer_is_documented_as_problem_json() -> None:
    import json

    doc = json.loads(render_openapi())
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for code, resp in op["responses"].items():
                if code.startswith(("4", "5")):
                    assert list(resp["content"]) == ["application/problem+json"], (path, method)
            if "security" in op:
                assert {"401", "403"} <= set(op["responses"]), (path, method)
                assert op["x-required-scope"] in SCOPES
    weights = doc["paths"]["/v1/models/{model_id}/weights"]["get"]
    assert weights["x-required-scope"] == "models:download"
