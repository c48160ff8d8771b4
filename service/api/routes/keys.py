from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import ContextDep, Limit, Offset, SessionDep, require
from service.api.schemas import KeyCreate, KeyCreated, KeyPublic, KeysPublic, Problem
from service.registry import keys

router = APIRouter(prefix="/v1/keys", tags=["keys"], dependencies=[require("admin")])


def key_public(row: keys.ApiKey) -> KeyPublic:
    return KeyPublic(
        id=row.id,
        name=row.name,
        prefix=row.prefix,
        scopes=list(row.scopes),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


@router.post(
    "",
    status_code=201,
    response_model=KeyCreated,
    responses={422: {"model": Problem}},
    operation_id="keys_create",
)
def create_key(body: KeyCreate, session: SessionDep) -> KeyCreated:
    """A new API key. The key is in this answer only: it is stored hashed."""
    row, key = keys.create_key(session=session, name=body.name, scopes=list(body.scopes))
    session.commit()
    return KeyCreated(**key_public(row).model_dump(), key=key)


@router.get("", response_model=KeysPublic, operation_id="keys_list")
def list_keys(session: SessionDep, offset: Offset = 0, limit: Limit = 50) -> KeysPublic:
    """Every key, without secrets."""
    return KeysPublic(
        data=[key_public(k) for k in keys.list_keys(session=session, offset=offset, limit=limit)],
        count=keys.count_keys(session=session),
        offset=offset,
        limit=limit,
    )


@router.delete(
    "/{key_id}",
    response_model=KeyPublic,
    responses={404: {"model": Problem}},
    operation_id="keys_revoke",
)
def revoke_key(key_id: str, session: SessionDep, ctx: ContextDep) -> KeyPublic:
    """Revoke a key: refused at once here, within a few seconds on other API replicas."""
    row = keys.revoke_key(session=session, key_id=key_id)
    session.commit()
    ctx.key_cache.clear()
    return key_public(row)
