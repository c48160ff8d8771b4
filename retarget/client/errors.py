"""Typed errors from the service's problem+json answers (RFC 9457).

Every problem ``type`` the service sends (``urn:retarget:problem:<slug>``) has one
class here, found by ``PROBLEMS[slug]``; a slug this client does not know yet gives
``ClientError`` (4xx) or ``ServerError`` (5xx). Every class keeps the whole problem
(``problem``) and its members as attributes (``detail``, ``errors``, ``min_epsilon``).

    RetargetClientError
    ├── ConnectionFailed        the service could not be reached
    ├── PendingTimeout          still 202 (profiles or a plan being computed) at the deadline
    ├── JobFailed               a job waited on ended failed
    ├── DownloadCorrupt         downloaded bytes do not hash to the ETag
    └── ApiError                any problem+json answer (status, slug, problem)
        ├── ClientError         4xx: a refusal; the request must change
        │   ├── BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed,
        │   │   NotAcceptable, UnsupportedMediaType, PayloadTooLarge, Busy (429)
        │   ├── RequestValidationError   the body or query does not match the schema
        │   ├── InvalidInput ── InvalidUpload, ProfileTooCostly
        │   ├── Conflict ── BudgetExceeded
        │   ├── InfeasibleTarget         carries ``min_epsilon``
        │   ├── Unsupported
        │   └── ProfileFailed    the model's profile cannot be computed (over its budget)
        └── ServerError         5xx: the service failed; retrying may help
            ├── InternalError, ProfilesPending, StorageUnavailable
"""

from __future__ import annotations

from typing import Any

PREFIX = "urn:retarget:problem:"


class RetargetClientError(Exception):
    """Base of every error this client raises."""


class ConnectionFailed(RetargetClientError):
    """The service could not be reached (refused, timed out, DNS)."""


class PendingTimeout(RetargetClientError):
    """The answer was still being computed (202) when the wait ran out."""

    def __init__(self, message: str, jobs: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.jobs = jobs or []


class JobFailed(RetargetClientError):
    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(f"job {job.get('id')} failed: {job.get('error')}")
        self.job = job


class DownloadCorrupt(RetargetClientError):
    """The bytes written do not hash to the sha256 the service announced."""


class ApiError(RetargetClientError):
    """A problem+json answer."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.type = str(problem.get("type", ""))
        self.slug = self.type.removeprefix(PREFIX) if self.type.startswith(PREFIX) else ""
        self.title = str(problem.get("title", ""))
        self.detail = str(problem.get("detail", "") or problem.get("title", "") or status)
        self.errors: list[dict[str, Any]] = list(problem.get("errors") or [])
        super().__init__(f"{status} {self.slug or 'error'}: {self.detail}")

    def __getattr__(self, name: str) -> Any:
        """Extension members of the problem (``min_epsilon``, ``limit``, ``job_ids``)."""
        problem = self.__dict__.get("problem", {})
        if name in problem:
            return problem[name]
        raise AttributeError(name)


class ClientError(ApiError):
    """4xx: the service refused the request."""


class ServerError(ApiError):
    """5xx: the service could not answer."""


class BadRequest(ClientError): ...


class Unauthorized(ClientError): ...


class Forbidden(ClientError): ...


class NotFound(ClientError): ...


class MethodNotAllowed(ClientError): ...


class NotAcceptable(ClientError): ...


class UnsupportedMediaType(ClientError): ...


class PayloadTooLarge(ClientError): ...


class Busy(ClientError):
    """429: a lock or the connection pool stayed taken; retry after ``Retry-After``."""


class RequestValidationError(ClientError): ...


class InvalidInput(ClientError): ...


class InvalidUpload(InvalidInput): ...


class ProfileTooCostly(InvalidInput): ...


class Conflict(ClientError): ...


class BudgetExceeded(Conflict): ...


class InfeasibleTarget(ClientError):
    """No plan meets the target; ``min_epsilon`` is the smallest reachable (or None)."""

    @property
    def min_epsilon(self) -> float | None:
        value = self.problem.get("min_epsilon")
        return None if value is None else float(value)


class Unsupported(ClientError): ...


class ComputeLimitExceeded(ClientError):
    """The plan ran past its wall-clock or memory limit: ``limit`` says which."""

    @property
    def limit(self) -> str | None:
        value = self.problem.get("limit")
        return None if value is None else str(value)


class InternalError(ServerError): ...


class ProfileFailed(ClientError):
    """The model's privacy profile cannot be computed (over its budget or limits, or its
    stored record is invalid): plans of its dataset leave it out."""


class ProfilesPending(ServerError): ...


class StorageUnavailable(ServerError): ...


#: problem slug -> class: one per problem type the service sends.
PROBLEMS: dict[str, type[ApiError]] = {
    "bad-request": BadRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not-found": NotFound,
    "method-not-allowed": MethodNotAllowed,
    "not-acceptable": NotAcceptable,
    "unsupported-media-type": UnsupportedMediaType,
    "payload-too-large": PayloadTooLarge,
    "busy": Busy,
    "validation-error": RequestValidationError,
    "invalid-input": InvalidInput,
    "invalid-upload": InvalidUpload,
    "profile-too-costly": ProfileTooCostly,
    "conflict": Conflict,
    "budget-exceeded": BudgetExceeded,
    "infeasible-target": InfeasibleTarget,
    "unsupported": Unsupported,
    "compute-limit-exceeded": ComputeLimitExceeded,
    "internal-error": InternalError,
    "profile-failed": ProfileFailed,
    "profiles-pending": ProfilesPending,
    "storage-unavailable": StorageUnavailable,
}


def error_for(status: int, problem: dict[str, Any]) -> ApiError:
    """The typed error of a problem answer (by its slug, else by the status class)."""
    slug = str(problem.get("type", "")).removeprefix(PREFIX)
    cls = PROBLEMS.get(slug)
    if cls is None:
        cls = ServerError if status >= 500 else ClientError
    return cls(status, problem)
