"""Callback notifications: one attempt per outbox claim, retries scheduled on the queue.

An attempt resolves the deployment's callback URL again (``callbacks.resolve_target``:
internal addresses refused, the address pinned), POSTs the signed notification with
short timeouts, and reads only the status. What the deployment's history shows is
"delivered (HTTP n)" or "failed (HTTP n | no response)"; why a connection failed stays
in the server's log, since it would map the network behind the service.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from service.deployments import outbox
from service.deployments.callbacks import (
    AllowList,
    CallbackRefused,
    Resolver,
    post_status,
    redact_url,
    resolve_target,
)
from service.deployments.signing import sign
from service.registry.db import session_scope
from service.registry.models import Deployment, DeploymentEvent

log = logging.getLogger(__name__)


def attempt_notification(
    *,
    session_factory: sessionmaker[Session],
    url: str,
    payload: dict[str, Any],
    secret: str,
    allow: AllowList,
    connect_timeout_s: float,
    read_timeout_s: float,
    resolve: Resolver | None = None,
) -> tuple[bool, str]:
    """(delivered, outcome shown to callers) of one POST of the notification."""
    body = payload["body"]
    raw = json.dumps(body, sort_keys=True).encode()
    delivery = f"{payload['deployment_id']}:{body['release_id']}"
    headers = {
        "Content-Type": "application/json",
        "X-Retarget-Signature": sign(secret, delivery, raw),
        "X-Retarget-Delivery": delivery,
    }
    try:
        target = resolve_target(url, allow, resolve)
        status = post_status(
            target,
            raw,
            headers,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
        )
    except CallbackRefused as exc:
        log.warning("callback to %s refused: %s", redact_url(url), exc)
        return False, "failed (no response)"
    except Exception as exc:  # the receiver's failure is data, not our crash
        log.warning("callback to %s failed: %s: %s", redact_url(url), type(exc).__name__, exc)
        return False, "failed (no response)"
    if 200 <= status < 300:
        return True, f"delivered (HTTP {status})"
    return False, f"failed (HTTP {status})"


def callback_url(session_factory: sessionmaker[Session], deployment_id: str) -> str | None:
    with session_scope(session_factory) as session:
        dep = session.get(Deployment, deployment_id)
        return dep.callback_url if dep is not None else None


def record_outcome(
    *,
    session_factory: sessionmaker[Session],
    item: tuple[str, int],
    deployment_id: str,
    release_id: str | None,
    delivered: bool,
    outcome: str,
    final: bool,
) -> None:
    """The end of the notification (delivered, or failed for good), in the deployment's
    history and on its outbox item, together."""
    attempts = item[1]
    with session_scope(session_factory) as session:
        outbox.finish(
            session,
            *item,
            "done" if delivered else "failed",
            {
                "status": "delivered" if delivered else "failed",
                "outcome": outcome,
                "attempts": attempts,
                **({} if delivered else {"reason": outcome}),
            },
        )
        dep = session.get(Deployment, deployment_id)
        if dep is None:
            return
        if not delivered and final:
            dep.last_error = f"callback failed after {attempts} attempts: {outcome}"
        session.add(
            DeploymentEvent(
                deployment_id=deployment_id,
                kind="callback_ok" if delivered else "callback_failed",
                release_id=release_id,
                reason=f"{attempts} attempt(s): {outcome}",
            )
        )
