"""Every operation of the client once, without I/O.

An operation is a generator: it yields what it needs done (``Call`` an endpoint,
``Fetch`` a file to disk, ``Sleep``) and receives the answer; it returns the typed
result. The sync client (``sync.py``) and the async one (``aio.py``) each drive
these generators with their own httpx client, so both behave the same.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from retarget.client.errors import JobFailed, PendingTimeout, error_for
from retarget.client.folders import BodyFile
from retarget.client.types import Download, Job

#: A progress callback: bytes done so far, and the total when known.
Progress = Callable[[int, int | None], None]

#: How long a call that answers 202 (profiles or a plan being computed) is retried.
DEFAULT_WAIT_S = 600.0


@dataclass(frozen=True)
class Upload:
    """A model registration: the checkpoint file and its metadata, multipart."""

    file: Path
    metadata: dict[str, Any]
    progress: Progress | None = None


@dataclass(frozen=True)
class Call:
    """One request. ``body``: a file streamed as the whole body; ``form``: fields sent
    as multipart/form-data without any file."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    upload: Upload | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: BodyFile | None = None
    form: dict[str, str] | None = None


@dataclass(frozen=True)
class Fetch:
    """Download ``path`` into ``target``: resumed with Range from ``target.part`` when
    one is left, checked against the sha256 in the ETag, then renamed into place.
    With ``if_changed`` an existing ``target`` with the current sha256 is kept (304)."""

    path: str
    target: Path
    progress: Progress | None = None
    if_changed: bool = False


@dataclass(frozen=True)
class Sleep:
    seconds: float


Step = Call | Fetch | Sleep
T = TypeVar("T")
Op = Generator[Step, Any, T]


def raise_for_problem(resp: httpx.Response) -> None:
    """A typed error for any 4xx/5xx answer (problem+json or not)."""
    if resp.status_code < 400:
        return
    try:
        problem = resp.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        problem = {"title": resp.reason_phrase, "detail": resp.text[:500] or resp.reason_phrase}
    raise error_for(resp.status_code, problem)


def send(call: Call, wait: float | None = DEFAULT_WAIT_S) -> Op[httpx.Response]:
    """``call``, retried while it answers 202 (after ``Retry-After``) for at most ``wait``
    seconds (``None``: return the 202 as it is); errors raised as typed exceptions."""
    deadline = time.monotonic() + (wait or 0.0)
    while True:
        resp: httpx.Response = yield call
        if resp.status_code != 202 or wait is None:
            raise_for_problem(resp)
            return resp
        body = _json_or_empty(resp)
        if time.monotonic() >= deadline:
            raise PendingTimeout(
                f"{call.method} {call.path} still pending after {wait:g} s", body.get("jobs")
            )
        retry = float(resp.headers.get("Retry-After", "1") or 1)
        yield Sleep(min(max(retry, 0.2), 10.0, max(deadline - time.monotonic(), 0.2)))


def _json_or_empty(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def json_call(call: Call, wait: float | None = DEFAULT_WAIT_S) -> Op[Any]:
    resp = yield from send(call, wait)
    return resp.json()


def drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def metadata_for(
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
) -> dict[str, Any]:
    """The ``metadata`` part of a registration. ``extra`` passes any other field through
    as it is (fields newer than this client, e.g. ``weights_uri``)."""
    if isinstance(mechanism, str):
        mechanism = json.loads(mechanism)
    if step is not None and run_id is None:
        raise ValueError("a lineage step needs its run_id")
    meta = drop_none(
        dataset_id=dataset_id,
        name=name,
        mechanism=mechanism,
        version=version,
        lineage=drop_none(run_id=run_id, step=step) if run_id is not None else None,
        metrics=metrics or None,
        claimed=claimed,
        architecture=architecture,
    )
    meta.update(extra or {})
    return meta


def register(
    file: str | Path,
    metadata: dict[str, Any],
    progress: Progress | None = None,
    exist_ok: bool = False,
) -> Op[dict[str, Any]]:
    """Upload a checkpoint; ``exist_ok``: the model already registered under this name and
    version is answered (200) when it has these bytes and metadata."""
    path = Path(file)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    params = {"exist_ok": "true"} if exist_ok else None
    call = Call("POST", "/v1/models", params=params, upload=Upload(path, metadata, progress))
    return (yield from json_call(call, wait=None))


def page_params(offset: int, limit: int, **filters: Any) -> dict[str, Any]:
    return drop_none(offset=offset, limit=limit, **filters)


def weights(
    path: str, target: str | Path, progress: Progress | None, if_changed: bool
) -> Op[Download]:
    result: Download = yield Fetch(path, Path(target), progress, if_changed)
    return result


def wait_job(job_id: str, timeout: float, poll: float) -> Op[Job]:
    """Poll a job until it is finished (its record) or failed (``JobFailed``)."""
    deadline = time.monotonic() + timeout
    while True:
        job = Job.model_validate((yield from json_call(Call("GET", f"/v1/jobs/{job_id}"))))
        if job.status == "finished":
            return job
        if job.status == "failed":
            raise JobFailed(job.model_dump())
        if time.monotonic() >= deadline:
            raise PendingTimeout(f"job {job_id} is still {job.status} after {timeout:g} s")
        yield Sleep(poll)


def run_sync(op: Op[T], perform: Callable[[Step], Any]) -> T:
    """Drive ``op`` to its result, ``perform``-ing each step (the sync driver). A step
    that fails is raised inside ``op`` at its ``yield``, so an operation may answer its
    own errors; one that does not lets it pass unchanged."""
    try:
        step = next(op)
        while True:
            try:
                result = perform(step)
            except Exception as exc:
                step = op.throw(exc)
            else:
                step = op.send(result)
    except StopIteration as stop:
        return stop.value
