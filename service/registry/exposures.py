"""Exposures (private models seen outside a release) and each dataset's selection uniform.

Plain repository functions; the ledger that charges exposures and the draw that
uses the uniform are in ``service.jobs``.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounting.mechanisms import canonical_json
from service.registry.models import Exposure, SelectionUniform, utcnow


def exposure_subject(kind: str, model_ids: list[str], key_id: str | None) -> str:
    payload = {"kind": kind, "models": sorted(model_ids), "key": key_id}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def record_exposure(
    *,
    session: Session,
    dataset_id: str,
    kind: str,
    model_ids: list[str],
    key_id: str | None,
    key_name: str,
    detail: dict[str, Any] | None = None,
    subject: str | None = None,
) -> Exposure:
    """The exposure's row: a repeat by the same key of the same models (or of the same
    ``subject``, when the caller names what makes two exposures one) adds to its
    ``count``; anything else is a new row."""
    subject = subject or exposure_subject(kind, model_ids, key_id)
    row = session.scalar(
        select(Exposure).where(Exposure.dataset_id == dataset_id, Exposure.subject == subject)
    )
    if row is None:
        now = utcnow()
        row = Exposure(
            dataset_id=dataset_id,
            kind=kind,
            model_ids=sorted(model_ids),
            subject=subject,
            key_id=key_id,
            key_name=key_name,
            count=1,
            detail=detail or {},
            first_at=now,
            last_at=now,
        )
        session.add(row)
    else:
        row.count += 1
        row.last_at = utcnow()
        if detail:
            row.detail = detail
    session.flush()
    return row


def list_exposures(*, session: Session, dataset_id: str) -> list[Exposure]:
    return list(
        session.scalars(
            select(Exposure)
            .where(Exposure.dataset_id == dataset_id)
            .order_by(Exposure.first_at, Exposure.id)
        )
    )


def selection_uniform(*, session: Session, dataset_id: str) -> float:
    """The dataset's secret uniform on [0, 1), drawn with the OS CSPRNG on first use.

    Call it under the dataset's lock (``repository.dataset_lock``): two first uses
    must not draw two uniforms."""
    row = session.get(SelectionUniform, dataset_id)
    if row is None:
        # 53 random bits: every value is an exact double in [0, 1)
        row = SelectionUniform(dataset_id=dataset_id, u=secrets.randbits(53) / 2**53)
        session.add(row)
        session.flush()
    return float(row.u)
