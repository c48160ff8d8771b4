"""Listings at scale: the dataset page is paginated and computes one epsilon per
distinct mechanism (cached by mechanism hash, in the process or in Redis); a model
whose profile failed is shown as such without hiding the others."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient

from service.accounting.conversions import round_up
from service.accounting.mechanisms import mechanism_hash, parse_mechanism
from service.accounting.profiles.profile import compute_profile
from service.dashboard.auth import COOKIE
from service.errors import ProfileFailed
from service.profiles.epsilons import EpsilonCache, _keys
from tests.helpers import checkpoint_bytes, sgd, upload

REDIS_URL = os.environ.get("RETARGET_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
MECHS = [sgd(0.9, steps=50), sgd(1.3, steps=50)]


@pytest.fixture
def filled(client: TestClient) -> tuple[str, list[str]]:
    """A dataset of 5 models over 2 distinct mechanisms, and a dashboard login."""
    ds = client.post("/v1/datasets", json={"name": "pages"}).json()["id"]
    ids = []
    for i in range(5):
        meta = {"dataset_id": ds, "name": f"m{i}", "mechanism": MECHS[i % 2]}
        # each its own bytes: the same bytes twice are one run, refused as a copy
        resp = upload(client, checkpoint_bytes(i, {"w": (2, 2)}), json.dumps(meta))
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    key = client.post("/v1/keys", json={"name": "viewer", "scopes": ["read"]}).json()
    signer = client.app.state.session_signer  # type: ignore[attr-defined]
    client.cookies.set(COOKIE, signer.issue(key["id"], 0), path="/admin")
    return ds, ids


def model_links(html: str) -> list[str]:
    return re.findall(r'href="/admin/models/([0-9a-f-]{36})"', html)


def test_dataset_page_is_paginated_and_computes_one_epsilon_per_mechanism(
    client: TestClient, filled: tuple[str, list[str]]
) -> None:
    ds, ids = filled
    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    before = ctx.epsilons.computed
    first = client.get(f"/admin/datasets/{ds}", params={"limit": 2})
    assert first.status_code == 200, first.text
    assert model_links(first.text) == ids[:2]
    assert "5 model(s)" in first.text and 'rel="next"' in first.text
    assert 'rel="prev"' not in first.text
    last = client.get(f"/admin/datasets/{ds}", params={"offset": 4, "limit": 2})
    assert model_links(last.text) == ids[4:]
    assert 'rel="prev"' in last.text and 'rel="next"' not in last.text
    full = client.get(f"/admin/datasets/{ds}")
    assert model_links(full.text) == ids
    # the two mechanisms' epsilons were computed once each, however many models and views
    assert ctx.epsilons.computed - before == 2
    for mech in MECHS:
        eps = compute_profile(parse_mechanism(mech)).epsilon(1e-5, "best")
        assert f">{round_up(eps)}<" in full.text
    assert client.get(f"/admin/datasets/{ds}", params={"limit": 0}).status_code == 422


def test_a_failed_profile_hides_no_other_model(
    client: TestClient, filled: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    ds, _ = filled
    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    bad = mechanism_hash(parse_mechanism(MECHS[1]))
    real = ctx.profiles.profile

    def profile(mechanism, wait_s=None):  # type: ignore[no-untyped-def]
        if mechanism_hash(mechanism) == bad:
            raise ProfileFailed("the profile is too costly")
        return real(mechanism, wait_s)

    monkeypatch.setattr(ctx.profiles, "profile", profile)
    page = client.get(f"/admin/datasets/{ds}")
    assert page.status_code == 200
    assert page.text.count("profile failed") == 2  # models 1 and 3
    good = compute_profile(parse_mechanism(MECHS[0])).epsilon(1e-5, "best")
    assert page.text.count(f">{round_up(good)}<") == 3


@pytest.fixture
def rclient() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    made: list[str] = []
    client.made = made  # type: ignore[attr-defined]
    yield client
    if made:
        client.delete(*made)
    client.close()


def test_epsilons_are_shared_through_redis(rclient: redis.Redis) -> None:
    profile = compute_profile(parse_mechanism(sgd(1.7, steps=30, q=0.02)))
    name, _ = _keys(profile, 1e-6, "best")
    rclient.made.append(name)  # type: ignore[attr-defined]
    rclient.delete(name)
    one, two = EpsilonCache(rclient), EpsilonCache(rclient)
    assert one.many([profile, profile], 1e-6) == [profile.epsilon(1e-6, "best")] * 2
    assert one.computed == 1
    assert two.epsilon(profile, 1e-6) == profile.epsilon(1e-6, "best")
    assert two.computed == 0  # served from Redis
    assert rclient.ttl(name) > 0
    # another delta or accountant is another entry
    assert two.epsilon(profile, 1e-6, "rdp") == profile.epsilon(1e-6, "rdp")
    assert two.computed == 1
    # a flushed cache only costs a recomputation
    rclient.delete(name)
    assert EpsilonCache(rclient).epsilon(profile, 1e-6) == profile.epsilon(1e-6, "best")
