"""SQLAlchemy 2 models of the registry. The schema changes only by Alembic migrations."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from service.registry.columns import UTCDateTime, new_id, utcnow

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str | None] = mapped_column(Text)
    metric: Mapped[str | None] = mapped_column(String(100))
    #: "max" | "min": the dataset metric's direction (None: "max")
    metric_goal: Mapped[str | None] = mapped_column(String(3))
    epsilon_cap: Mapped[float | None] = mapped_column(Float)
    delta_cap: Mapped[float | None] = mapped_column(Float)
    #: the public validation split (a safetensors blob: inputs, labels), if registered
    validation_sha256: Mapped[str | None] = mapped_column(String(64))
    validation_examples: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    models: Mapped[list[Model]] = relationship(back_populates="dataset")


class Model(Base):
    __tablename__ = "models"
    __table_args__ = (
        UniqueConstraint("dataset_id", "name", "version", name="uq_models_dataset_name_version"),
        Index("ix_models_dataset_created", "dataset_id", "created_at"),
        Index("ix_models_run", "dataset_id", "lineage_run_id"),
        # one verified checkpoint per (run, step): a run has one iterate per step
        Index(
            "uq_models_run_step",
            "dataset_id",
            "lineage_run_id",
            "lineage_step",
            unique=True,
            postgresql_where=text("lineage_verified"),
            sqlite_where=text("lineage_verified"),
        ),
        # one original per (dataset, bytes): a copy is never a second independent run
        Index(
            "uq_models_dataset_sha256",
            "dataset_id",
            "sha256",
            unique=True,
            postgresql_where=text("duplicate_of IS NULL"),
            sqlite_where=text("duplicate_of IS NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer, default=1)

    mechanism: Mapped[dict[str, Any]] = mapped_column(JSON)
    mechanism_type: Mapped[str] = mapped_column(String(64))
    mechanism_hash: Mapped[str] = mapped_column(String(64), index=True)

    lineage_run_id: Mapped[str | None] = mapped_column(String(200))
    lineage_step: Mapped[int | None] = mapped_column(BigInteger)
    #: the mechanism was checked step for step against the run's verified checkpoints at
    #: registration (service.accounting.mechanisms.lineage); rows from before the check stay False
    lineage_verified: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false(), nullable=False
    )

    signature: Mapped[dict[str, Any]] = mapped_column(JSON)
    signature_hash: Mapped[str] = mapped_column(String(64), index=True)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    #: safetensors (one file) | hf_bundle | peft_lora (service.registry.bundles); a
    #: bundle's sha256 is its manifest's blob and ``files`` lists [{path, size, sha256}]
    kind: Mapped[str] = mapped_column(
        String(16), default="safetensors", server_default="safetensors"
    )
    files: Mapped[list[Any] | None] = mapped_column(JSON)

    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    #: per metric, how it was computed: {"source": "prior" | "models" | "private",
    #: "sensitivity": float | None} (service.accounting.planning.metrics); None: "models"
    metric_declarations: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    #: registered before copies were refused: the earlier model with the same bytes
    #: in this dataset (plans leave a copy out; it is never an independent run)
    duplicate_of: Mapped[str | None] = mapped_column(String(36))
    #: the declared network (service.merging.architecture), checked against the signature
    architecture: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    claimed_epsilon: Mapped[float | None] = mapped_column(Float)
    claimed_delta: Mapped[float | None] = mapped_column(Float)
    #: understated | consistent | conservative | unverifiable (service.accounting.profiles.claims)
    claim_check: Mapped[str | None] = mapped_column(String(32))
    #: Our bound at the claimed delta (best accountant), unrounded.
    recomputed_epsilon: Mapped[float | None] = mapped_column(Float)

    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    #: retired by an admin (``service.registry.retirement``): kept for the ledger's
    #: history, left out of every plan of its dataset
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    retired_reason: Mapped[str | None] = mapped_column(Text)

    dataset: Mapped[Dataset] = relationship(back_populates="models")


class ModelAlias(Base):
    """A name for one version of a model (``champion``, ``staging``): per dataset and
    model name, moved atomically; each move is kept in ``model_alias_events``."""

    __tablename__ = "model_aliases"
    __table_args__ = (
        UniqueConstraint("dataset_id", "name", "alias", name="uq_model_aliases_name_alias"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="RESTRICT"))
    #: the model's name (every version of it shares the alias's namespace)
    name: Mapped[str] = mapped_column(String(200))
    alias: Mapped[str] = mapped_column(String(64))
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id", ondelete="RESTRICT"), index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ModelAliasEvent(Base):
    """The history of an alias: every set, move and delete, with who did it."""

    __tablename__ = "model_alias_events"
    __table_args__ = (Index("ix_model_alias_events_name", "dataset_id", "name", "created_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(200))
    alias: Mapped[str] = mapped_column(String(64))
    #: the version it points at after the event (None: deleted) and before it (None: new)
    model_id: Mapped[str | None] = mapped_column(String(36))
    version: Mapped[int | None] = mapped_column(Integer)
    previous_model_id: Mapped[str | None] = mapped_column(String(36))
    previous_version: Mapped[int | None] = mapped_column(Integer)
    key_name: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ModelTag(Base):
    """A free key/value tag on one model version (a label: the value is empty)."""

    __tablename__ = "model_tags"

    model_id: Mapped[str] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(String(1000), default="")
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Release(Base):
    """A released model: the plan behind it, the guarantee it carries, its artifact."""

    __tablename__ = "releases"
    __table_args__ = (Index("ix_releases_dataset_created", "dataset_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="RESTRICT"))
    #: sha256 of the canonical request (dataset, target, method, candidates): one release each
    request_hash: Mapped[str] = mapped_column(String(64), unique=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    method: Mapped[str] = mapped_column(String(32))
    accountant: Mapped[str] = mapped_column(String(8))
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    bound: Mapped[str] = mapped_column(String(200))
    weights: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: RS only: the drawn model. Kept for audit; never shown outside admin views.
    drawn_model_id: Mapped[str | None] = mapped_column(String(36))
    #: models whose outputs this release may reveal (RS: the whole support, not the draw)
    exposed_model_ids: Mapped[list[Any]] = mapped_column(JSON)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    #: safetensors (one file) | hf_bundle | peft_lora (service.registry.bundles); a
    #: bundle's sha256 is its manifest's blob and ``files`` lists [{path, size, sha256}]
    kind: Mapped[str] = mapped_column(
        String(16), default="safetensors", server_default="safetensors"
    )
    files: Mapped[list[Any] | None] = mapped_column(JSON)
    #: done | pending (an async merge: the ledger counts it, its files are not there yet)
    status: Mapped[str] = mapped_column(String(16), default="done", server_default="done")
    #: how many times a start of the service took up this pending merge again after the
    #: process running it died (``service.releases.recovery``)
    merge_recoveries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    deployment: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Exposure(Base):
    """Private models seen outside a release, charged by the ledger like the models a
    release exposes: a raw download of a registered model (``download``) or a dry-run
    plan whose answer was computed from the models themselves (``scored_plan``). One
    row per (kind, models, API key); ``count`` says how often it happened."""

    __tablename__ = "exposures"
    __table_args__ = (Index("ix_exposures_dataset_subject", "dataset_id", "subject"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="RESTRICT"))
    #: download | scored_plan
    kind: Mapped[str] = mapped_column(String(32))
    model_ids: Mapped[list[Any]] = mapped_column(JSON)
    #: sha256 of (kind, sorted model ids, key id): the row a repeat increments
    subject: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str | None] = mapped_column(String(36))
    key_name: Mapped[str] = mapped_column(String(200))
    count: Mapped[int] = mapped_column(Integer, default=1)
    #: what was asked (a scored plan's objective and target), for the audit trail
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    first_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class SelectionUniform(Base):
    """The secret uniform on [0, 1) that every random selection of a dataset inverts its
    CDF at (common random numbers: service.releases.retarget). Drawn once with the OS
    CSPRNG; never shown."""

    __tablename__ = "selection_uniforms"

    dataset_id: Mapped[str] = mapped_column(
        ForeignKey("datasets.id", ondelete="RESTRICT"), primary_key=True
    )
    u: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ApiKey(Base):
    """An API key: random, shown once, stored as the sha256 of the whole key."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    #: the first characters of the key, to tell keys apart in listings
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: dashboard sessions of this key carry the epoch they began in; logout bumps it,
    #: which ends every one of them server-side
    session_epoch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Deployment(Base):
    """A name bound to a dataset and a privacy policy, serving its current release."""

    __tablename__ = "deployments"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="RESTRICT"))
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    method: Mapped[str] = mapped_column(String(32))
    accountant: Mapped[str] = mapped_column(String(8))
    callback_url: Mapped[str | None] = mapped_column(String(2000))
    current_release_id: Mapped[str | None] = mapped_column(
        ForeignKey("releases.id", ondelete="RESTRICT")
    )
    last_error: Mapped[str | None] = mapped_column(Text)
    #: the model name and alias this deployment follows (service.deployments.follow): it
    #: serves that one model, and a move of the alias re-targets it; None: the dataset's plan
    follows_name: Mapped[str | None] = mapped_column(String(200))
    follows_alias: Mapped[str | None] = mapped_column(String(64))
    #: orders policy changes (unix seconds, or the webhook's explicit version): an older
    #: one than this is refused, so a delayed or replayed change cannot roll a policy back
    policy_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class DeploymentEvent(Base):
    """The history of a deployment: policies, releases, failures, callbacks."""

    __tablename__ = "deployment_events"
    __table_args__ = (Index("ix_deployment_events_deployment", "deployment_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    deployment_id: Mapped[str] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"))
    #: created | policy_changed | policy_failed | callback_ok | callback_failed
    kind: Mapped[str] = mapped_column(String(32))
    epsilon: Mapped[float | None] = mapped_column(Float)
    delta: Mapped[float | None] = mapped_column(Float)
    release_id: Mapped[str | None] = mapped_column(String(36))
    reason: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WebhookDelivery(Base):
    """A policy-change webhook delivery, kept so a replay answers with the first result."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    source: Mapped[str] = mapped_column(String(200))
    status_code: Mapped[int] = mapped_column(Integer)
    response: Mapped[dict[str, Any]] = mapped_column(JSON)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class OutboxItem(Base):
    """Deployment work recorded in the same transaction as what asked for it (a webhook
    delivery, a policy change): dispatched to the queue after the commit, and again by
    any drain while it is due, so it survives a queue that is down; applied once."""

    __tablename__ = "outbox"
    __table_args__ = (Index("ix_outbox_due", "status", "next_attempt_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    #: policy_change | notify
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    #: pending | done | failed
    status: Mapped[str] = mapped_column(String(16), default="pending")
    #: attempts started; an attempt claims the row by moving it from n to n + 1
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    #: when a drain may (re)dispatch it: now when recorded, later while it is on the queue
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class AppSecret(Base):
    """Secrets the service makes for itself, once, shared by every replica (the dashboard
    session key when ``RETARGET_SESSION_SECRET`` is unset)."""

    __tablename__ = "app_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Upload(Base):
    """A blob a key sent ahead of registering a bundle (``PUT /v1/uploads/{sha256}``).

    A registration may name only blobs its own key sent (knowing a sha256 proves
    nothing); the row goes when the registration that names it commits, or when it
    expires (``RETARGET_UPLOAD_TTL_S``). ``created``: the upload put the blob in the
    store, so an expired one may take it out again when nothing else refers to it."""

    __tablename__ = "uploads"
    __table_args__ = (Index("ix_uploads_created_at", "created_at"),)

    #: the API key's id ("" when auth is off)
    owner: Mapped[str] = mapped_column(String(36), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
