"""Settings: every knob is an environment variable ``RETARGET_*``.

The defaults run with nothing installed: a SQLite file and a blob folder
under ``RETARGET_DATA_DIR``. ``RETARGET_DATABASE_URL`` switches to Postgres.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RETARGET_", extra="ignore")

    data_dir: Path = Field(
        default=Path("retarget-data"),
        description="Folder for the embedded SQLite database and the blob store.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; default: a SQLite file in the data dir. "
        "Postgres: postgresql+psycopg://user@host:5432/db",
    )
    blob_dir: Path | None = Field(
        default=None, description="Blob store folder; default: <data_dir>/blobs."
    )
    blob_url: str | None = Field(
        default=None,
        description="Object storage for blobs, s3://bucket/prefix (credentials, region and "
        "endpoint from the standard AWS variables and config); default: the blob folder.",
    )
    blob_cache_dir: Path | None = Field(
        default=None,
        description="With s3:// blobs: local staging of uploads and cached copies the merges "
        "read; default: <data_dir>/blob-cache.",
    )
    blob_cache_max_bytes: int = Field(
        default=20 * 1024**3,
        ge=0,
        description="With s3:// blobs: cached copies past this size are removed, oldest first "
        "(copies used in the last hour stay).",
    )
    blob_s3_addressing_style: Literal["auto", "path", "virtual"] = Field(
        default="auto", description="With s3:// blobs: bucket in the path or the host name."
    )
    presign_expiry_s: int = Field(
        default=900,
        gt=0,
        le=7 * 24 * 3600,
        description="Lifetime of the presigned URLs a download with ?redirect=true answers.",
    )
    reference_buckets: str = Field(
        default="",
        description="Comma-separated buckets a model's weights_uri (s3://) may name; empty: none.",
    )
    reference_root: Path | None = Field(
        default=None,
        description="Folder a model's weights_uri (file://) may name files under; unset: none.",
    )
    redis_url: str | None = Field(
        default=None, description="Redis URL for the profile cache and job queue."
    )
    max_upload_bytes: int = Field(
        default=200 * 1024**3,
        gt=0,
        description="Largest accepted checkpoint upload (a bundle: all its files together).",
    )
    upload_ttl_s: int = Field(
        default=24 * 3600,
        gt=0,
        le=30 * 24 * 3600,
        description="How long a file sent ahead of a bundle's registration (PUT "
        "/v1/uploads/{sha256}) waits for the registration that names it.",
    )
    max_metadata_bytes: int = Field(
        default=1024**2, gt=0, description="Largest accepted metadata JSON."
    )
    auto_migrate: bool = Field(
        default=True, description="Run `alembic upgrade head` when the server starts."
    )
    profile_cache_bytes: int = Field(
        default=2 * 1024**3,
        ge=0,
        description="Memory the profiles cached in a process may take (least recently used "
        "dropped first; with Redis every profile stays in Redis).",
    )
    profile_max_pld_points: float = Field(
        default=8_000_000,
        gt=0,
        description="Largest estimated PLD grid (points) a profile computes; past it, RDP only.",
    )
    profile_max_rdp_evaluations: int = Field(
        default=20_000_000,
        gt=0,
        description="Largest RDP computation (orders x distinct steps); past it, 422 at upload.",
    )
    profile_budget_s: float = Field(
        default=600.0,
        gt=0,
        description="Wall-clock budget of one profile computation, in a process of its own "
        "(embedded) or a worker's job (Redis); past it the profile fails and plans leave the "
        "model out.",
    )
    profile_request_wait_s: float = Field(
        default=60.0,
        ge=0,
        description="Longest a request waits for a profile being computed (embedded); then it "
        "answers 202 (a plan) or goes on without it (a registration).",
    )
    profile_failure_ttl_s: float = Field(
        default=600.0,
        ge=0,
        description="How long a failed profile stays failed before it may be computed again.",
    )
    db_pool_size: int = Field(default=10, ge=1, description="Database connections kept open.")
    db_max_overflow: int = Field(
        default=20, ge=0, description="Connections opened past the pool under load."
    )
    db_pool_timeout_s: float = Field(
        default=10.0, gt=0, description="Wait for a free connection before answering 429."
    )
    release_lock_timeout_s: float = Field(
        default=30.0, gt=0, description="Wait for a dataset's release lock before answering 429."
    )
    torch_threads_per_merge: int = Field(
        default=1, ge=0, description="torch threads a merge uses (0: torch's default)."
    )
    merge_threads: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Worker threads of one CPU merge of bundles, reading, summing and casting "
        "slabs while the merge writes (0: one per core, at most 8).",
    )
    plan_request_budget_s: float = Field(
        default=2.0, ge=0, description="Longest a plan computes in its request; then a 202 job."
    )
    plan_job_budget_s: float = Field(
        default=600.0, gt=0, description="Wall-clock budget of one plan job."
    )
    plan_job_workers: int = Field(default=2, ge=1, description="Plan jobs computing at once.")
    plan_job_memory_bytes: int = Field(
        default=2 * 1024**3,
        ge=16 * 1024**2,
        description="Memory one plan process may allocate beyond its loaded code; past it "
        "the plan fails.",
    )
    shutdown_grace_s: int = Field(
        default=10,
        ge=1,
        description="On SIGTERM, how long requests in flight may finish before they are cut.",
    )
    release_async_bytes: int = Field(
        default=256 * 1024**2,
        ge=0,
        description="A release merging models larger than this answers 202 and merges as a job.",
    )
    queue_name: str = Field(default="retarget", description="RQ queue of the accounting jobs.")
    merge_queue: str = Field(
        default="merges",
        description="RQ queue of the async release merges (a GPU host: "
        "`retarget worker --queue merges`).",
    )
    merge_device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto",
        description="Where a linear merge accumulates: cuda, cpu, or auto (cuda if there is one).",
    )
    job_timeout_s: int = Field(default=1800, gt=0, description="Longest one job may run.")
    job_retries: int = Field(default=3, ge=0, description="Retries of a failed or lost job.")
    worker_monitoring_interval_s: int = Field(
        default=30, gt=0, description="How often a busy worker refreshes its heartbeat."
    )
    worker_heartbeat_slack_s: int = Field(
        default=60,
        gt=0,
        description="A job whose worker missed heartbeats for this long (past the interval) "
        "is taken as lost and retried.",
    )
    worker_maintenance_interval_s: int = Field(
        default=600, gt=0, description="How often a worker cleans up lost jobs."
    )
    auth: bool = Field(
        default=True,
        description="Require an API key on every endpoint but health, metrics and webhooks.",
    )
    webhook_secrets: dict[str, str] = Field(
        default_factory=dict,
        description='Per-source secrets of signed policy-change webhooks, JSON: {"ops": "..."}.',
    )
    webhook_tolerance_s: int = Field(
        default=300, gt=0, description="Largest accepted age of a webhook's timestamp."
    )
    callback_secret: str | None = Field(
        default=None, description="Secret that signs the notifications sent to callback URLs."
    )
    callback_retry_delays_s: list[float] = Field(
        default=[1, 5, 30, 120, 600],
        description="Delays between attempts to notify a callback URL (each attempt is "
        "scheduled on the queue, never slept in a worker).",
    )
    callback_allow: str = Field(
        default="",
        description="Comma-separated host names and CIDR networks that callbacks may reach "
        "although they are internal (loopback, private, link-local...); empty: none.",
    )
    callback_connect_timeout_s: float = Field(
        default=3.0, gt=0, description="Connect (and TLS handshake) timeout of a callback."
    )
    callback_read_timeout_s: float = Field(
        default=5.0, gt=0, description="Longest wait for the callback receiver's status line."
    )
    callback_concurrency: int = Field(
        default=4, ge=1, description="Callbacks sent at once by one API process (in-process)."
    )
    outbox_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="How often a worker drains the outbox (deployment work recorded in the "
        "database but not yet on the queue).",
    )
    session_secret: str | None = Field(
        default=None,
        description="Signs admin dashboard sessions; unset: a secret created once in the "
        "database, shared by every replica.",
    )
    forwarded_allow_ips: str = Field(
        default="",
        description="Comma-separated proxy addresses (or *) whose X-Forwarded-Proto is "
        "trusted (TLS terminated in front: cookies become Secure); empty: none.",
    )
    docs: bool = Field(
        default=False, description="Serve the interactive API docs at /docs, /redoc."
    )
    metrics: Literal["key", "open", "off"] = Field(
        default="key",
        description="/metrics: key (an API key with the read scope), open, or off (404).",
    )
    readyz_min_free_bytes: int = Field(
        default=1024**3,
        ge=0,
        description="/readyz is not ready while the blob store has less free space than this.",
    )
    session_ttl_s: int = Field(default=12 * 3600, gt=0, description="Dashboard session length.")
    host: str = "127.0.0.1"
    port: int = 8000

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'retarget.db').resolve()}"

    @property
    def resolved_blob_dir(self) -> Path:
        return (self.blob_dir or self.data_dir / "blobs").resolve()

    @property
    def resolved_blob_cache_dir(self) -> Path:
        return (self.blob_cache_dir or self.data_dir / "blob-cache").resolve()


@lru_cache
def get_settings() -> Settings:
    return Settings()
