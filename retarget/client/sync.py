"""``RetargetClient``: the service's API as typed methods, on httpx (blocking).

    from retarget.client import RetargetClient

    with RetargetClient() as rt:                    # RETARGET_URL, RETARGET_API_KEY
        ds = rt.datasets.create("digits")
        m = rt.models.register("a.safetensors", dataset_id=ds.id, name="a",
                               mechanism={"type": "dp_sgd", ...})
        plan = rt.plans.create(ds.id, epsilon=2.0, delta=1e-6)
        release = rt.releases.create(ds.id, epsilon=2.0, delta=1e-6)
        rt.releases.download(release.release_id, "merged.safetensors")

Answers the service is still computing (202) are waited for (``wait`` seconds,
600 by default); errors are the typed exceptions of ``retarget.client.errors``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

import retarget.client.ops as ops
from retarget.client.config import resolve
from retarget.client.errors import ConnectionFailed
from retarget.client.model_admin import ModelAdmin
from retarget.client.naming import ModelNames
from retarget.client.ops import DEFAULT_WAIT_S, Call, Fetch, Op, Progress, Sleep, T
from retarget.client.resources import (
    DatasetOps,
    DeploymentOps,
    JobOps,
    KeyOps,
    ModelOps,
    PlanOps,
    ReleaseOps,
)
from retarget.client.transfer import (
    fetch_sync,
    multipart,
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


class RetargetClient:
    """A connection to one Retarget service. ``url`` and ``api_key`` default to the
    ``RETARGET_URL`` and ``RETARGET_API_KEY`` environment variables."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 600.0,
        wait: float = DEFAULT_WAIT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url, headers = resolve(url, api_key)
        self.wait = wait
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )
        self.datasets = Datasets(self)
        self.models = Models(self)
        self.plans = Plans(self)
        self.releases = Releases(self)
        self.deployments = Deployments(self)
        self.keys = Keys(self)
        self.jobs = Jobs(self)

    def __enter__(self) -> RetargetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def run(self, op: Op[T]) -> T:
        """Drive one operation of ``retarget.client.ops`` to its result."""
        return ops.run_sync(op, self._perform)

    def health(self) -> dict[str, Any]:
        return dict(self.run(ops.json_call(Call("GET", "/healthz"))))

    def retarget(self, dataset_id: str, epsilon: float, delta: float, **options: Any) -> Release:
        """Release a merged model for the target (``releases.create``)."""
        return self.releases.create(dataset_id, epsilon, delta, **options)

    # -- the driver -----------------------------------------------------------------

    def _perform(self, step: ops.Step) -> Any:
        try:
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                return None
            if isinstance(step, Fetch):
                return self._fetch(step)
            return self._call(step)
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"cannot reach {self.url}: {exc}") from exc

    def _call(self, call: Call) -> httpx.Response:
        if call.body is not None:
            return self._http.request(
                call.method,
                call.path,
                content=call.body.chunks(),
                headers=call.headers,
            )
        if call.form is not None:
            form = {k: (None, v, "application/json") for k, v in call.form.items()}
            return self._http.request(call.method, call.path, files=form)
        if call.upload is None:
            return self._http.request(
                call.method,
                call.path,
                params=call.params,
                json=call.json,
                content=call.content,
                headers=call.headers,
            )
        data, files, reader = multipart(call.upload)
        try:
            return self._http.request(
                call.method, call.path, params=call.params, data=data, files=files
            )
        finally:
            reader.close()

    def _fetch(self, fetch: Fetch) -> Download:
        return fetch_sync(self._http, fetch)


class _Resource:
    def __init__(self, client: RetargetClient) -> None:
        self._c = client


class Datasets(_Resource):
    def create(
        self,
        name: str,
        *,
        description: str | None = None,
        metric: str | None = None,
        epsilon_cap: float | None = None,
        delta_cap: float | None = None,
        exist_ok: bool = False,
    ) -> Dataset:
        """Create a dataset; ``exist_ok``: the one of this name when its settings are these
        (``Conflict`` when they differ). Datasets are named by id or name everywhere."""
        return self._c.run(
            DatasetOps.create(name, description, metric, epsilon_cap, delta_cap, exist_ok)
        )

    def list(self, *, offset: int = 0, limit: int = 50) -> Page[Dataset]:
        return self._c.run(DatasetOps.list(offset, limit))

    def get(self, dataset_id: str) -> Dataset:
        return self._c.run(DatasetOps.get(dataset_id))

    def ledger(self, dataset_id: str) -> Ledger:
        return self._c.run(DatasetOps.ledger(dataset_id))

    def set_validation(self, dataset_id: str, split: bytes | str | Path) -> Dataset:
        """Register the dataset's public validation split (a safetensors file or its bytes)."""
        return self._c.run(DatasetOps.set_validation(dataset_id, split))


class Models(_Resource, ModelNames, ModelAdmin):
    def register(
        self,
        file: str | Path,
        *,
        dataset_id: str,
        name: str,
        mechanism: dict[str, Any] | str,
        version: int | None = None,
        run_id: str | None = None,
        step: int | None = None,
        metrics: dict[str, float] | None = None,
        claimed: dict[str, float] | None = None,
        architecture: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        progress: Progress | None = None,
        exist_ok: bool = False,
    ) -> Model:
        """Register a safetensors checkpoint, or a bundle folder (sharded safetensors and
        their index, a PEFT adapter and its configuration, sidecars) through resumable
        uploads: run again after an interruption, only what is missing is sent.
        ``extra`` metadata fields pass through."""
        meta = ops.metadata_for(
            dataset_id=dataset_id,
            name=name,
            mechanism=mechanism,
            version=version,
            run_id=run_id,
            step=step,
            metrics=metrics,
            claimed=claimed,
            architecture=architecture,
            extra=extra,
        )
        return self._c.run(ModelOps.register(file, meta, progress, exist_ok))

    def list(
        self, *, dataset_id: str | None = None, offset: int = 0, limit: int = 50
    ) -> Page[Model]:
        return self._c.run(ModelOps.list(dataset_id, offset, limit))

    def get(self, model_id: str) -> Model:
        return self._c.run(ModelOps.get(model_id))

    def epsilon(self, model_id: str, *, delta: float = 1e-5, accountant: str = "best") -> Epsilon:
        return self._c.run(ModelOps.epsilon(model_id, delta, accountant, self._c.wait))

    def download(
        self, model_id: str, target: str | Path, *, progress: Progress | None = None
    ) -> Download:
        return self._c.run(ModelOps.download(model_id, target, progress))


class Plans(_Resource):
    def create(
        self,
        dataset_id: str,
        epsilon: float,
        delta: float,
        *,
        method: str = "auto",
        accountant: str = "best",
        **options: Any,
    ) -> Plan:
        """A dry run (costs no privacy). ``options``: model_ids, metric, metric_goal, ..."""
        body = {"method": method, "accountant": accountant, **options}
        return self._c.run(PlanOps.create(dataset_id, epsilon, delta, body, self._c.wait))

    def guarantee(
        self,
        dataset_id: str,
        delta: float,
        method: str,
        weights: dict[str, float],
        *,
        accountant: str = "best",
    ) -> Guarantee:
        """What fixed weights prove at ``delta``."""
        return self._c.run(
            PlanOps.guarantee(dataset_id, delta, method, weights, accountant, self._c.wait)
        )


class Releases(_Resource):
    def create(
        self,
        dataset_id: str,
        epsilon: float,
        delta: float,
        *,
        method: str = "auto",
        accountant: str = "best",
        deployment: str | None = None,
        **options: Any,
    ) -> Release:
        """Plan and release (costs privacy; the same request returns the same release)."""
        body = {"method": method, "accountant": accountant, "deployment": deployment, **options}
        return self._c.run(ReleaseOps.create(dataset_id, epsilon, delta, body, self._c.wait))

    def list(
        self, *, dataset_id: str | None = None, offset: int = 0, limit: int = 50
    ) -> Page[Release]:
        """Releases, newest first (of one dataset with ``dataset_id``)."""
        return self._c.run(ReleaseOps.list(dataset_id, offset, limit))

    def get(self, release_id: str) -> Release:
        return self._c.run(ReleaseOps.get(release_id))

    def download(
        self, release_id: str, target: str | Path, *, progress: Progress | None = None
    ) -> Download:
        return self._c.run(ReleaseOps.download(release_id, target, progress))

    def download_folder(
        self, release_id: str, folder: str | Path, *, progress: Progress | None = None
    ) -> FolderDownload:
        """Every file of the release into ``folder``, each checked against its sha256."""
        return self._c.run(ReleaseOps.download_folder(release_id, folder, progress))


class Deployments(_Resource):
    def create(
        self,
        name: str,
        dataset_id: str | None,
        epsilon: float,
        delta: float,
        *,
        method: str | None = None,
        accountant: str | None = None,
        callback_url: str | None = None,
        follows: str | None = None,
        exist_ok: bool = False,
    ) -> Deployment:
        """Bind ``name`` to a dataset (id or name) and a policy. ``follows``:
        ``[DATASET/]NAME@ALIAS``, serve that alias's version alone (re-targeted when it
        moves); ``exist_ok``: the deployment of this name, as it is, when it has the same
        dataset, method, accountant, callback and alias."""
        return self._c.run(
            DeploymentOps.create(
                name,
                dataset_id,
                epsilon,
                delta,
                method,
                accountant,
                callback_url,
                follows,
                exist_ok,
            )
        )

    def list(self, *, offset: int = 0, limit: int = 50) -> Page[Deployment]:
        return self._c.run(DeploymentOps.list(offset, limit))

    def get(self, name: str) -> Deployment:
        return self._c.run(DeploymentOps.get(name))

    def set_policy(
        self, name: str, epsilon: float, delta: float, *, reason: str | None = None
    ) -> Deployment:
        return self._c.run(DeploymentOps.set_policy(name, epsilon, delta, reason))

    def pull(self, name: str, target: str | Path, *, progress: Progress | None = None) -> Download:
        """The deployment's current model into ``target``; kept as it is when current."""
        return self._c.run(DeploymentOps.pull(name, target, progress))

    def pull_folder(
        self, name: str, folder: str | Path, *, progress: Progress | None = None
    ) -> FolderDownload:
        """The files of the deployment's current release into ``folder`` (a bundle, or
        ``model.safetensors``): files already current are kept, files an earlier pull
        wrote that this release lacks are removed."""
        return self._c.run(DeploymentOps.pull_folder(name, folder, progress))


class Keys(_Resource):
    def create(self, name: str, scopes: list[str]) -> KeyCreated:
        return self._c.run(KeyOps.create(name, scopes))

    def list(self, *, offset: int = 0, limit: int = 50) -> Page[Key]:
        return self._c.run(KeyOps.list(offset, limit))

    def revoke(self, key_id: str) -> Key:
        return self._c.run(KeyOps.revoke(key_id))


class Jobs(_Resource):
    def get(self, job_id: str) -> Job:
        return self._c.run(JobOps.get(job_id))

    def wait(self, job_id: str, *, timeout: float = 600.0, poll: float = 1.0) -> Job:
        """The job once finished; ``JobFailed`` if it failed, ``PendingTimeout`` past
        ``timeout`` seconds."""
        return self._c.run(ops.wait_job(job_id, timeout, poll))
