"""Domain exceptions of Retarget.

Domain code raises these; only ``service.api`` knows HTTP and maps each class
to a status code and a problem+json ``type`` (``service/api/problems.py``).

    RetargetError
    ├── InvalidInput        input that parses but makes no sense (422)
    │   ├── InvalidUpload   an uploaded file that is not a valid safetensors file (422)
    │   └── ProfileTooCostly a mechanism whose profile cannot be computed within limits (422)
    ├── PayloadTooLarge     a body over the configured limit (413)
    ├── Unauthenticated     no valid API key (401)
    ├── Forbidden           the key lacks the scope (403)
    ├── NotFound            the named thing does not exist (404)
    ├── Conflict            a uniqueness rule would break (409)
    │   └── BudgetExceeded  a release would push a dataset over its cap (409)
    ├── InfeasibleTarget    no plan meets the target (422, carries min_epsilon)
    ├── Unsupported         the analysis does not apply to these inputs (422)
    ├── StorageError        the blob store, database or cache failed (503)
    ├── Busy                a lock, the connection pool or the plan processes stayed taken (429)
    ├── ComputeLimitExceeded a plan ran past its wall-clock or memory limit (422)
    │   └── ProfileOverLimit a privacy profile stopped at its limit (also a ProfileFailed)
    ├── ProfileFailed       a privacy profile failed for good (422)
    └── ProfilesPending     profiles are being computed: try again (202, not an error)
"""

from __future__ import annotations

from typing import Any


class RetargetError(Exception):
    """Base of every error Retarget raises on purpose."""

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class InvalidInput(RetargetError):
    """Input that is well-formed but invalid."""


class InvalidUpload(InvalidInput):
    """An uploaded file that is not a valid safetensors checkpoint."""


class ProfileTooCostly(InvalidInput):
    """A mechanism whose privacy profile cannot be computed within the configured limits."""


class PayloadTooLarge(RetargetError):
    """A request body over the configured size limit."""


class Unauthenticated(RetargetError):
    """No API key, or one that is unknown or revoked."""


class Forbidden(RetargetError):
    """The API key does not carry the scope this operation needs."""


class NotFound(RetargetError):
    """The named resource does not exist."""


class Conflict(RetargetError):
    """The request would break a uniqueness rule."""


class BudgetExceeded(Conflict):
    """A release would push a dataset's cumulative guarantee over its cap."""


class InfeasibleTarget(RetargetError):
    """No plan meets the requested (epsilon, delta)."""


class Unsupported(RetargetError):
    """The privacy analysis does not apply to the given inputs."""


class StorageError(RetargetError):
    """The blob store or the database could not complete the operation."""


class Busy(RetargetError):
    """A shared resource (a dataset's release lock, the connection pool, the plan
    processes) stayed taken."""


class ComputeLimitExceeded(RetargetError):
    """A computation ran past its wall-clock budget or its memory limit and was stopped.

    ``extra``: ``limit`` ("wall_clock" or "memory") and the limit's value
    (``budget_s`` or ``memory_bytes``)."""


class ProfilesPending(RetargetError):
    """Privacy profiles needed for the answer are queued or being computed."""

    def __init__(self, detail: str, job_ids: list[str]) -> None:
        super().__init__(detail, job_ids=job_ids)
        self.job_ids = job_ids


class ProfileFailed(RetargetError):
    """The computation of a privacy profile failed for good (its error is on the job)."""


class ProfileOverLimit(ComputeLimitExceeded, ProfileFailed):
    """A privacy profile's computation was stopped at its wall-clock budget or memory
    limit: answered as the limit it hit (``extra`` as ``ComputeLimitExceeded``'s)."""
