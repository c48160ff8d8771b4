"""``AsyncRetargetClient``: the same typed methods as ``RetargetClient``, awaited.

async with AsyncRetargetClient() as rt:
    ds = await rt.datasets.create("digits")
    release = await rt.releases.create(ds.id, epsilon=2.0, delta=1e-6)
    await rt.releases.download(release.release_id, "merged.safetensors")
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

import retarget.client.ops as ops
from retarget.client.config import resolve
from retarget.client.errors import ConnectionFailed
from retarget.client.model_admin import AsyncModelAdmin
from retarget.client.naming import AsyncModelNames
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
    fetch_async,
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


class AsyncRetargetClient:
    """A connection to one Retarget service. ``url`` and ``api_key`` default to the
    ``RETARGET_URL`` and ``RETARGET_API_KEY`` environment variables."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 600.0,
        wait: float = DEFAULT_WAIT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url, headers = resolve(url, api_key)
        self.wait = wait
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )
        self.datasets = Datasets(self)
        self.models = Models(self)
        self.plans = Plans(self)
        self.releases = Releases(self)
        self.deployments = Deployments(self)
        self.keys = Keys(self)
        self.jobs = Jobs(self)

    async def __aenter__(self) -> AsyncRetargetClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def run(self, op: Op[T]) -> T:
        """Drive one operation of ``retarget.client.ops`` to its result (a failed step is
        raised inside it, as ``ops.run_sync`` does)."""
        try:
            step = next(op)
            while True:
                try:
                    result = await self._perform(step)
                except Exception as exc:
                    step = op.throw(exc)
                else:
                    step = op.send(result)
        except StopIteration as stop:
            return stop.value

    async def health(self) -> dict[str, Any]:
        return dict(await self.run(ops.json_call(Call("GET", "/healthz"))))

    async def retarget(
        self, dataset_id: str, epsilon: float, delta: float, **options: Any
    ) -> Release:
        """Release a merged model for the target (``releases.create``)."""
        return await self.releases.create(dataset_id, epsilon, delta, **options)

    async def _perform(self, step: ops.Step) -> Any:
        try:
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                return None
            if isinstance(step, Fetch):
                return await self._fetch(step)
            return await self._call(step)
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"cannot reach {self.url}: {exc}") from exc

    async def _call(self, call: Call) -> httpx.Response:
        if call.body is not None:
            return await self._http.request(
                call.method,
                call.path,
                content=call.body.achunks(),
                headers=call.headers,
            )
        if call.form is not None:
            form = {k: (None, v, "application/json") for k, v in call.form.items()}
            return await self._http.request(call.method, call.path, files=form)
        if call.upload is None:
            return await self._http.request(
                call.method,
                call.path,
                params=call.params,
                json=call.json,
                content=call.content,
                headers=call.headers,
            )
        data, files, reader = multipart(call.upload)
        try:
            return await self._http.request(
                call.method, call.path, params=call.params, data=data, files=files
            )
        finally:
            reader.close()

    async def _fetch(self, fetch: Fetch) -> Download:
        return await fetch_async(self._http, fetch)


class _Resource:
    def __init__(self, client: AsyncRetargetClient) -> None:
        self._c = client


class Datasets(_Resource):
    async def create(
        self,
        name: str,
        *,
        description: str | None = None,
        metric: str | None = None,
        epsilon_cap: float | None = None,
        delta_cap: float | None = None,
        exist_ok: bool = False,
    ) -> Dataset:
        return await self._c.run(
            DatasetOps.create(name, description, metric, epsilon_cap, delta_cap, exist_ok)
        )

    async def list(self, *, offset: int = 0, limit: int = 50) -> Page[Dataset]:
        return await self._c.run(DatasetOps.list(offset, limit))

    async def get(self, dataset_id: str) -> Dataset:
        return await self._c.run(DatasetOps.get(dataset_id))

    async def ledger(self, dataset_id: str) -> Ledger:
        return await self._c.run(DatasetOps.ledger(dataset_id))

    async def set_validation(self, dataset_id: str, split: bytes | str | Path) -> Dataset:
        """Register the dataset's public validation split (a safetensors file or its bytes)."""
        return await self._c.run(DatasetOps.set_validation(dataset_id, split))


class Models(_Resource, AsyncModelNames, AsyncModelAdmin):
    async def register(
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
        return await self._c.run(ModelOps.register(file, meta, progress, exist_ok))

    async def list(
        self, *, dataset_id: str | None = None, offset: int = 0, limit: int = 50
    ) -> Page[Model]:
        return await self._c.run(ModelOps.list(dataset_id, offset, limit))

    async def get(self, model_id: str) -> Model:
        return await self._c.run(ModelOps.get(model_id))

    async def epsilon(
        self, model_id: str, *, delta: float = 1e-5, accountant: str = "best"
    ) -> Epsilon:
        return await self._c.run(ModelOps.epsilon(model_id, delta, accountant, self._c.wait))

    async def download(
        self, model_id: str, target: str | Path, *, progress: Progress | None = None
    ) -> Download:
        return await self._c.run(ModelOps.download(model_id, target, progress))


class Plans(_Resource):
    async def create(
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
        return await self._c.run(PlanOps.create(dataset_id, epsilon, delta, body, self._c.wait))

    async def guarantee(
        self,
        dataset_id: str,
        delta: float,
        method: str,
        weights: dict[str, float],
        *,
        accountant: str = "best",
    ) -> Guarantee:
        """What fixed weights prove at ``delta``."""
        return await self._c.run(
            PlanOps.guarantee(dataset_id, delta, method, weights, accountant, self._c.wait)
        )


class Releases(_Resource):
    async def create(
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
        return await self._c.run(ReleaseOps.create(dataset_id, epsilon, delta, body, self._c.wait))

    async def list(
        self, *, dataset_id: str | None = None, offset: int = 0, limit: int = 50
    ) -> Page[Release]:
        """Releases, newest first (of one dataset with ``dataset_id``)."""
        return await self._c.run(ReleaseOps.list(dataset_id, offset, limit))

    async def get(self, release_id: str) -> Release:
        return await self._c.run(ReleaseOps.get(release_id))

    async def download(
        self, release_id: str, target: str | Path, *, progress: Progress | None = None
    ) -> Download:
        return await self._c.run(ReleaseOps.download(release_id, target, progress))

    async def download_folder(
        self, release_id: str, folder: str | Path, *, progress: Progress | None = None
    ) -> FolderDownload:
        """Every file of the release into ``folder``, each checked against its sha256."""
        return await self._c.run(ReleaseOps.download_folder(release_id, folder, progress))


class Deployments(_Resource):
    async def create(
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
        return await self._c.run(
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

    async def list(self, *, offset: int = 0, limit: int = 50) -> Page[Deployment]:
        return await self._c.run(DeploymentOps.list(offset, limit))

    async def get(self, name: str) -> Deployment:
        return await self._c.run(DeploymentOps.get(name))

    async def set_policy(
        self, name: str, epsilon: float, delta: float, *, reason: str | None = None
    ) -> Deployment:
        return await self._c.run(DeploymentOps.set_policy(name, epsilon, delta, reason))

    async def pull(
        self, name: str, target: str | Path, *, progress: Progress | None = None
    ) -> Download:
        """The deployment's current model into ``target``; kept as it is when current."""
        return await self._c.run(DeploymentOps.pull(name, target, progress))

    async def pull_folder(
        self, name: str, folder: str | Path, *, progress: Progress | None = None
    ) -> FolderDownload:
        """The files of the deployment's current release into ``folder`` (a bundle, or
        ``model.safetensors``): files already current are kept, files an earlier pull
        wrote that this release lacks are removed."""
        return await self._c.run(DeploymentOps.pull_folder(name, folder, progress))


class Keys(_Resource):
    async def create(self, name: str, scopes: list[str]) -> KeyCreated:
        return await self._c.run(KeyOps.create(name, scopes))

    async def list(self, *, offset: int = 0, limit: int = 50) -> Page[Key]:
        return await self._c.run(KeyOps.list(offset, limit))

    async def revoke(self, key_id: str) -> Key:
        return await self._c.run(KeyOps.revoke(key_id))


class Jobs(_Resource):
    async def get(self, job_id: str) -> Job:
        return await self._c.run(JobOps.get(job_id))

    async def wait(self, job_id: str, *, timeout: float = 600.0, poll: float = 1.0) -> Job:
        """The job once finished; ``JobFailed`` if it failed, ``PendingTimeout`` past
        ``timeout`` seconds."""
        return await self._c.run(ops.wait_job(job_id, timeout, poll))
