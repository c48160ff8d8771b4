"""The app factory."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import Scope

from service import __version__
from service.api import problems
from service.api.deps import AppContext, required_scope
from service.api.gate import ApiKeyGate
from service.api.limits import BodySizeLimit
from service.api.openapi import TAGS, install_docs, install_document
from service.api.proxy import TrustedProxyHeaders
from service.api.routes import (
    datasets,
    deployments,
    health,
    hf,
    keys,
    model_files,
    model_names,
    model_registration,
    model_retirement,
    models,
    plans,
    release_files,
    releases,
    uploads,
    webhooks,
)
from service.api.routes import jobs as jobs_routes
from service.config import Settings, get_settings
from service.dashboard import routes as dashboard
from service.deployments import runner
from service.errors import NotFound
from service.jobs.metrics import JobsCollector
from service.jobs.queue import InProcessJobs, Jobs, RQJobs, redis_client
from service.merging.base import configure_threads
from service.merging.device import configure_device
from service.merging.pipeline import configure_merge_threads
from service.plans.jobs import PlanJobs
from service.profiles.cache import cost_limits
from service.profiles.epsilons import EpsilonCache
from service.profiles.local import InProcessProfiles
from service.profiles.source import ProfileSource, RQProfiles
from service.registry import repository
from service.registry.db import make_engine, make_sessionmaker, pool_options
from service.registry.stores import make_blob_store
from service.releases.merge_jobs import enqueue_merge, run_merge
from service.releases.recovery import recover_pending
from service.tasks import RUNNERS, TASKS

log = logging.getLogger(__name__)

#: Every router of the API, in order; routes carry their full paths and scopes.
ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    datasets.router,
    model_registration.router,
    models.router,
    model_retirement.router,
    model_files.router,
    uploads.router,
    model_names.router,
    plans.router,
    releases.router,
    release_files.router,
    deployments.router,
    webhooks.router,
    jobs_routes.router,
    keys.router,
    hf.router,
)

#: Bodies other than checkpoint uploads are small JSON documents.
JSON_BODY_LIMIT = 4 * 1024 * 1024


def create_app(
    settings: Settings | None = None,
    *,
    session_factory: sessionmaker[Session] | None = None,
) -> FastAPI:
    """Build the app; ``session_factory`` lets tests bind sessions to one transaction."""
    settings = settings or get_settings()
    engine = make_engine(settings.resolved_database_url, **pool_options(settings))
    repository.LOCK_TIMEOUT_S = settings.release_lock_timeout_s
    configure_threads(settings.torch_threads_per_merge)
    configure_merge_threads(settings.merge_threads)
    configure_device(settings.merge_device)  # small releases merge in the request
    factory = session_factory or make_sessionmaker(engine)
    jobs: Jobs
    profiles: ProfileSource
    if settings.redis_url:
        jobs = RQJobs(redis_client(settings.redis_url), settings, tasks=TASKS)
        profiles = RQProfiles(jobs)
    else:
        jobs = InProcessJobs(background_workers=settings.callback_concurrency)
        profiles = InProcessProfiles(
            jobs,
            factory,
            limits=cost_limits(settings),
            cache_bytes=settings.profile_cache_bytes,
            budget_s=settings.profile_budget_s,
            wait_s=settings.profile_request_wait_s,
            failure_ttl_s=settings.profile_failure_ttl_s,
            memory_bytes=settings.plan_job_memory_bytes,
            processes=settings.plan_job_workers,
        )
    ctx = AppContext(
        settings=settings,
        engine=engine,
        session_factory=factory,
        blobs=make_blob_store(settings),
        jobs=jobs,
        profiles=profiles,
        plan_jobs=PlanJobs(
            settings.plan_job_workers,
            settings.plan_job_budget_s,
            memory_bytes=settings.plan_job_memory_bytes,
            # a computation in a request (a release, a guarantee) waits for a plan
            # process as long as a release waits for its dataset's lock
            wait_s=settings.release_lock_timeout_s,
        ),
        epsilons=EpsilonCache(jobs.client if isinstance(jobs, RQJobs) else None),
    )
    if isinstance(jobs, InProcessJobs):
        jobs.context, jobs.runners = ctx, RUNNERS
    app = FastAPI(
        title="Retarget",
        version=__version__,
        summary="Deployment-time privacy retargeting of differentially private models.",
        openapi_tags=TAGS,
        # the document stays public; the interactive pages (served from packaged files
        # by service.api.openapi) only when the operator asks: RETARGET_DOCS
        docs_url=None,
        redoc_url=None,
        lifespan=_lifespan,
    )
    app.state.ctx = ctx
    app.state.metrics = CollectorRegistry(auto_describe=True)
    app.state.metrics.register(JobsCollector(jobs.counters, jobs.queue_sizes))
    problems.install(app)
    for router in ROUTERS:
        app.include_router(router)

    upload_limit = settings.max_upload_bytes + settings.max_metadata_bytes + 1024 * 1024

    def limit_for(scope: Scope) -> int:
        method, path = scope.get("method"), str(scope.get("path", ""))
        if (
            (method == "POST" and path == "/v1/models")
            or (method == "PUT" and path.startswith("/v1/uploads/"))
            or (
                method == "PUT"
                and path.startswith("/v1/datasets/")
                and path.endswith("/validation")
            )
        ):
            return upload_limit
        return max(JSON_BODY_LIMIT, settings.max_metadata_bytes)

    app.add_middleware(BodySizeLimit, limit_for=limit_for)
    app.add_middleware(ApiKeyGate, context=lambda: ctx)  # outermost: 401 before any body
    dashboard.install(app, settings)
    app.add_middleware(TrustedProxyHeaders, allow=settings.forwarded_allow_ips)  # outermost
    if settings.docs:
        install_docs(app)
    install_document(app, api_routes, required_scope)
    # The modules imported by now (torch, numpy, SQLAlchemy, pydantic) are millions of
    # long-lived objects; frozen, the collector stops rescanning them on every full
    # collection (measured: 150 ms pauses at p99 under load before, see RESULTS.md).
    gc.freeze()
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """At start: start the plan processes (in the background), queue the outbox
    items left due and merge again the releases a dead process left pending. At the
    end (SIGTERM, after the requests in flight): end the plan processes, within
    seconds."""
    app.state.ctx.plan_jobs.pool.start_soon()
    await _drain_at_start(app)
    await _recover_at_start(app)
    try:
        yield
    finally:
        await run_in_threadpool(app.state.ctx.plan_jobs.close)
        close_profiles = getattr(app.state.ctx.profiles, "close", None)
        if close_profiles is not None:
            await run_in_threadpool(close_profiles)


async def _drain_at_start(app: FastAPI) -> None:
    """Queue the outbox items left due (a crash or a queue outage before this start).
    Embedded (no Redis), nothing but this process runs them: a process that died
    mid-attempt left its item leased, so those are taken too (attempts stay fenced)."""

    def drain() -> None:
        ctx = app.state.ctx
        try:
            queued = runner.drain(ctx, overdue_only=not isinstance(ctx.jobs, InProcessJobs))
        except Exception as exc:  # the database may not be up yet: workers drain too
            log.warning("outbox drain at start-up failed: %s", type(exc).__name__)
            return
        if queued:
            log.info("queued %d outbox item(s) left from before", queued)

    await run_in_threadpool(drain)


async def _recover_at_start(app: FastAPI) -> None:
    """Releases left ``pending`` by a process that died mid-merge: merged again, or
    abandoned with their budget freed (``service.releases.recovery``)."""
    ctx: AppContext = app.state.ctx
    factory, blobs = ctx.session_factory, ctx.blobs

    def running(release_id: str) -> bool:
        if not isinstance(ctx.jobs, RQJobs):
            return False  # embedded: only this process merges, and it has just started
        try:
            status = ctx.jobs.get(f"merge-{release_id}").status
        except NotFound:
            return False
        return status in ("queued", "started", "deferred", "scheduled")

    def resubmit(release_id: str) -> str | None:
        if isinstance(ctx.jobs, RQJobs):
            return enqueue_merge(ctx.jobs, factory, release_id).id
        _, job = ctx.plan_jobs.run(
            f"release\x00{release_id}",
            lambda: run_merge(factory, blobs, release_id),
            wait_s=0.0,
            scope="release",
            bounded=False,
        )
        return job.id if job is not None else None

    def recover() -> None:
        try:
            done = recover_pending(factory, running=running, resubmit=resubmit)
        except Exception as exc:  # the database or Redis may not be up yet
            log.warning("release recovery at start-up failed: %s", type(exc).__name__)
            return
        app.state.recovered = done
        if done.resubmitted or done.abandoned:
            log.warning(
                "pending releases left by a dead process: %d merged again, %d abandoned",
                len(done.resubmitted),
                len(done.abandoned),
            )

    await run_in_threadpool(recover)


def api_routes() -> list[APIRoute]:
    """Every operation of the API (the route table the scope test walks)."""
    return [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]
