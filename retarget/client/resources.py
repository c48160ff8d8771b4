"""The operations of each resource (``ops`` generators returning typed records), shared
by the sync and the async client."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from retarget.client.bundle_ops import (
    deployment_pull,
    model_pull,
    register_folder,
    release_pull,
)
from retarget.client.errors import Unsupported
from retarget.client.naming import ModelNameOps, model_path
from retarget.client.ops import (
    Call,
    Op,
    Progress,
    drop_none,
    json_call,
    page_params,
    register,
    send,
    weights,
)
from retarget.client.types import (
    Dataset,
    Deployment,
    Download,
    Epsilon,
    FolderDownload,
    Guarantee,
    Job,
    Key,
    KeyCreated,
    Ledger,
    Model,
    Page,
    Plan,
    Release,
)


def _segment(value: str) -> str:
    return quote(value, safe="")


class DatasetOps:
    @staticmethod
    def create(
        name: str,
        description: str | None,
        metric: str | None,
        epsilon_cap: float | None,
        delta_cap: float | None,
        exist_ok: bool = False,
    ) -> Op[Dataset]:
        body = drop_none(
            name=name,
            description=description,
            metric=metric,
            epsilon_cap=epsilon_cap,
            delta_cap=delta_cap,
        )
        params = {"exist_ok": "true"} if exist_ok else None
        return Dataset.model_validate(
            (yield from json_call(Call("POST", "/v1/datasets", params=params, json=body)))
        )

    @staticmethod
    def list(offset: int, limit: int) -> Op[Page[Dataset]]:
        call = Call("GET", "/v1/datasets", params=page_params(offset, limit))
        return Page[Dataset].model_validate((yield from json_call(call)))

    @staticmethod
    def get(dataset_id: str) -> Op[Dataset]:
        call = Call("GET", f"/v1/datasets/{_segment(dataset_id)}")
        return Dataset.model_validate((yield from json_call(call)))

    @staticmethod
    def ledger(dataset_id: str) -> Op[Ledger]:
        call = Call("GET", f"/v1/datasets/{_segment(dataset_id)}/ledger")
        return Ledger.model_validate((yield from json_call(call)))

    @staticmethod
    def set_validation(dataset_id: str, split: bytes | str | Path) -> Op[Dataset]:
        content = split if isinstance(split, bytes) else Path(split).read_bytes()
        call = Call(
            "PUT",
            f"/v1/datasets/{_segment(dataset_id)}/validation",
            content=content,
            headers={"Content-Type": "application/octet-stream"},
        )
        return Dataset.model_validate((yield from json_call(call)))


class ModelOps:
    @staticmethod
    def register(
        file: str | Path, meta: dict[str, Any], progress: Progress | None, exist_ok: bool = False
    ) -> Op[Model]:
        """A safetensors file (one multipart upload) or a bundle folder (resumable)."""
        path = Path(file)
        if path.is_dir():
            answer = yield from register_folder(path, meta, progress, exist_ok)
            return Model.model_validate(answer)
        return Model.model_validate((yield from register(path, meta, progress, exist_ok)))

    @staticmethod
    def list(dataset_id: str | None, offset: int, limit: int) -> Op[Page[Model]]:
        call = Call("GET", "/v1/models", params=page_params(offset, limit, dataset_id=dataset_id))
        return Page[Model].model_validate((yield from json_call(call)))

    @staticmethod
    def get(model: str) -> Op[Model]:
        """By id or ``DATASET/NAME[@VERSION|@ALIAS]`` (``retarget.client.naming``)."""
        return Model.model_validate((yield from json_call(Call("GET", model_path(model)))))

    @staticmethod
    def retire(model_id: str, reason: str, force: bool) -> Op[Model]:
        body = {"reason": reason, "force": force}
        call = Call("POST", f"/v1/models/{_segment(model_id)}/retire", json=body)
        return Model.model_validate((yield from json_call(call)))

    @staticmethod
    def restore(model_id: str) -> Op[Model]:
        call = Call("POST", f"/v1/models/{_segment(model_id)}/restore")
        return Model.model_validate((yield from json_call(call)))

    @staticmethod
    def epsilon(model: str, delta: float, accountant: str, wait: float) -> Op[Epsilon]:
        model_id = yield from ModelNameOps.model_id(model)
        params = {"delta": delta, "accountant": accountant}
        call = Call("GET", f"/v1/models/{_segment(model_id)}/epsilon", params=params)
        return Epsilon.model_validate((yield from json_call(call, wait)))

    @staticmethod
    def download(model: str, target: str | Path, progress: Progress | None) -> Op[Download]:
        model_id = yield from ModelNameOps.model_id(model)
        path = f"/v1/models/{_segment(model_id)}/weights"
        return (yield from weights(path, target, progress, if_changed=False))

    @staticmethod
    def download_folder(
        model_id: str, folder: str | Path, progress: Progress | None
    ) -> Op[FolderDownload]:
        return (yield from model_pull(model_id, Path(folder), progress))


class PlanOps:
    @staticmethod
    def create(
        dataset_id: str, epsilon: float, delta: float, options: dict[str, Any], wait: float
    ) -> Op[Plan]:
        body = drop_none(dataset_id=dataset_id, epsilon=epsilon, delta=delta, **options)
        return Plan.model_validate(
            (yield from json_call(Call("POST", "/v1/plans", json=body), wait))
        )

    @staticmethod
    def guarantee(
        dataset_id: str,
        delta: float,
        method: str,
        weights: dict[str, float],
        accountant: str,
        wait: float,
    ) -> Op[Guarantee]:
        body = {
            "dataset_id": dataset_id,
            "delta": delta,
            "method": method,
            "accountant": accountant,
            "weights": [{"model_id": m, "weight": w} for m, w in weights.items()],
        }
        call = Call("POST", "/v1/plans/guarantee", json=body)
        return Guarantee.model_validate((yield from json_call(call, wait)))


class ReleaseOps:
    @staticmethod
    def create(
        dataset_id: str, epsilon: float, delta: float, options: dict[str, Any], wait: float
    ) -> Op[Release]:
        body = drop_none(dataset_id=dataset_id, epsilon=epsilon, delta=delta, **options)
        resp = yield from send(Call("POST", "/v1/retarget", json=body), wait)
        return Release.model_validate({**resp.json(), "created": resp.status_code == 201})

    @staticmethod
    def list(dataset_id: str | None, offset: int, limit: int) -> Op[Page[Release]]:
        params = page_params(offset, limit, dataset_id=dataset_id)
        call = Call("GET", "/v1/releases", params=params)
        return Page[Release].model_validate((yield from json_call(call)))

    @staticmethod
    def get(release_id: str) -> Op[Release]:
        call = Call("GET", f"/v1/releases/{_segment(release_id)}")
        return Release.model_validate((yield from json_call(call)))

    @staticmethod
    def download(release_id: str, target: str | Path, progress: Progress | None) -> Op[Download]:
        """A single-file release into ``target``; a bundle (shards, an adapter, an
        ensemble) is a folder: its refusal names ``download_folder``."""
        path = f"/v1/releases/{_segment(release_id)}/weights"
        try:
            return (yield from weights(path, target, progress, if_changed=False))
        except Unsupported as exc:
            detail = f"{exc.detail}; with this client: releases.download_folder(release_id, folder)"
            raise Unsupported(exc.status, {**exc.problem, "detail": detail}) from exc

    @staticmethod
    def download_folder(
        release_id: str, folder: str | Path, progress: Progress | None
    ) -> Op[FolderDownload]:
        return (yield from release_pull(release_id, Path(folder), progress))


class DeploymentOps:
    @staticmethod
    def create(
        name: str,
        dataset_id: str | None,
        epsilon: float,
        delta: float,
        method: str | None,
        accountant: str | None,
        callback_url: str | None,
        follows: str | None = None,
        exist_ok: bool = False,
    ) -> Op[Deployment]:
        body = drop_none(
            name=name,
            dataset_id=dataset_id,
            epsilon=epsilon,
            delta=delta,
            method=method,
            accountant=accountant,
            callback_url=callback_url,
            follows=follows,
        )
        params = {"exist_ok": "true"} if exist_ok else None
        call = Call("POST", "/v1/deployments", params=params, json=body)
        return Deployment.model_validate((yield from json_call(call)))

    @staticmethod
    def list(offset: int, limit: int) -> Op[Page[Deployment]]:
        call = Call("GET", "/v1/deployments", params=page_params(offset, limit))
        return Page[Deployment].model_validate((yield from json_call(call)))

    @staticmethod
    def get(name: str) -> Op[Deployment]:
        call = Call("GET", f"/v1/deployments/{_segment(name)}")
        return Deployment.model_validate((yield from json_call(call)))

    @staticmethod
    def set_policy(name: str, epsilon: float, delta: float, reason: str | None) -> Op[Deployment]:
        body = drop_none(epsilon=epsilon, delta=delta, reason=reason)
        call = Call("PUT", f"/v1/deployments/{_segment(name)}/policy", json=body)
        return Deployment.model_validate((yield from json_call(call)))

    @staticmethod
    def pull(name: str, target: str | Path, progress: Progress | None) -> Op[Download]:
        path = f"/v1/deployments/{_segment(name)}/model"
        return (yield from weights(path, target, progress, if_changed=True))

    @staticmethod
    def pull_folder(name: str, folder: str | Path, progress: Progress | None) -> Op[FolderDownload]:
        return (yield from deployment_pull(name, Path(folder), progress))


class KeyOps:
    @staticmethod
    def create(name: str, scopes: list[str]) -> Op[KeyCreated]:
        call = Call("POST", "/v1/keys", json={"name": name, "scopes": list(scopes)})
        return KeyCreated.model_validate((yield from json_call(call)))

    @staticmethod
    def list(offset: int, limit: int) -> Op[Page[Key]]:
        call = Call("GET", "/v1/keys", params=page_params(offset, limit))
        return Page[Key].model_validate((yield from json_call(call)))

    @staticmethod
    def revoke(key_id: str) -> Op[Key]:
        return Key.model_validate(
            (yield from json_call(Call("DELETE", f"/v1/keys/{_segment(key_id)}")))
        )


class JobOps:
    @staticmethod
    def get(job_id: str) -> Op[Job]:
        return Job.model_validate(
            (yield from json_call(Call("GET", f"/v1/jobs/{_segment(job_id)}")))
        )
