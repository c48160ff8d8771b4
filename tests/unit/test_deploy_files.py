"""The multi-host compose file and the Kubernetes example name real settings, give every
Retarget container its own disk, and probe /healthz and /readyz."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from service.config import Settings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {f"RETARGET_{name.upper()}" for name in Settings.model_fields}


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker" / "compose.multi-host.yaml").read_text()))


def k8s() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def test_compose_replicas_share_only_the_database_redis_and_the_bucket() -> None:
    services = compose()["services"]
    retarget = {n: s for n, s in services.items() if "build" in s}
    long_running = {n for n, s in retarget.items() if n not in ("migrate", "bucket")}
    assert long_running == {"api-1", "api-2", "worker", "merge-worker"}
    disks = [tuple(services[n]["volumes"]) for n in sorted(long_running)]
    assert len(set(disks)) == len(disks)  # no disk is shared
    for name, service in retarget.items():
        env = service["environment"]
        assert env["RETARGET_BLOB_URL"].startswith("s3://"), name
        assert env["AWS_ENDPOINT_URL"] == "http://seaweedfs:8333"
        assert {k for k in env if k.startswith("RETARGET_")} <= SETTINGS, name
    nginx = compose()["configs"]["nginx"]["content"]
    assert "server api-1:8000" in nginx and "server api-2:8000" in nginx
    assert services["proxy"]["ports"] == ["8000:80"]


def test_kubernetes_example_has_its_deployments_job_and_probes() -> None:
    docs = k8s()
    kinds = {(d["kind"], d.get("metadata", {}).get("name")) for d in docs}
    assert {
        ("Deployment", "retarget-api"),
        ("Deployment", "retarget-worker"),
        ("Deployment", "retarget-merge-worker"),
        ("Job", "retarget-migrate"),
    } <= kinds
    api = next(d for d in docs if d.get("metadata", {}).get("name") == "retarget-api")
    container = api["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    kustomization = next(d for d in docs if d.get("kind") == "Kustomization")
    literals = [
        line.split("=", 1)[0]
        for gen in kustomization["configMapGenerator"] + kustomization["secretGenerator"]
        for line in gen["literals"]
    ]
    named = [
        e["name"]
        for d in docs
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
    ]
    assert {k for k in literals + named if k.startswith("RETARGET_")} <= SETTINGS
    listed = {Path(r).name for r in kustomization["resources"]}
    assert listed == {p.name for p in (ROOT / "deploy" / "k8s").glob("*.yaml")} - {
        "kustomization.yaml"
    }
