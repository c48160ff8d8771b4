"""Webhook signatures cover the timestamp, the delivery id and the body together."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from service.deployments.signing import sign, verify

SECRET = "s3cret"
BODY = b'{"deployment": "prod", "epsilon": 2.5, "delta": 1e-05}'
NOW = 1_800_000_000


def test_a_signature_verifies_for_its_delivery_and_body() -> None:
    header = sign(SECRET, "delivery-1", BODY, NOW)
    assert verify(SECRET, "delivery-1", BODY, header, 300, now=NOW) == ""


def test_the_signed_string_is_timestamp_delivery_and_body() -> None:
    # an independent computation of the documented scheme
    mac = hmac.new(SECRET.encode(), f"{NOW}.d-9.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, "d-9", BODY, NOW) == f"t={NOW},v1={mac}"


def test_a_captured_signature_does_not_carry_to_a_fresh_delivery_id() -> None:
    header = sign(SECRET, "delivery-1", BODY, NOW)
    assert verify(SECRET, "delivery-2", BODY, header, 300, now=NOW) != ""


def test_the_old_body_only_signature_is_refused() -> None:
    old = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert verify(SECRET, "delivery-1", BODY, f"t={NOW},v1={old}", 300, now=NOW) != ""


@pytest.mark.parametrize("skew", [-301, 301])
def test_outside_the_replay_window_is_refused(skew: int) -> None:
    header = sign(SECRET, "d", BODY, NOW)
    assert "from now" in verify(SECRET, "d", BODY, header, 300, now=NOW + skew)


def test_a_timestamp_swapped_into_a_signature_is_refused() -> None:
    header = sign(SECRET, "d", BODY, NOW - 250)
    forged = header.replace(f"t={NOW - 250}", f"t={NOW}")
    assert verify(SECRET, "d", BODY, forged, 300, now=NOW) == "the signature does not match"


@pytest.mark.parametrize("delivery", ["", "a.b", "x" * 201, "é", "with space"])
def test_delivery_ids_that_would_make_the_signed_string_ambiguous_are_refused(
    delivery: str,
) -> None:
    header = f"t={NOW},v1=00"
    assert verify(SECRET, delivery, BODY, header, 300, now=NOW) != ""
    with pytest.raises(ValueError):
        sign(SECRET, delivery, BODY, NOW)


def test_any_of_several_signatures_may_match_and_junk_does_not_crash() -> None:
    good = sign(SECRET, "d", BODY, NOW).split(",")[1]
    header = f"t={NOW},v1=ünïcode,v1=deadbeef,{good}"
    assert verify(SECRET, "d", BODY, header, 300, now=NOW) == ""
    assert verify(SECRET, "d", BODY, f"t={NOW},v1=ünïcode", 300, now=NOW) != ""


def test_the_docs_verification_snippet_accepts_ours_and_refuses_a_fresh_id() -> None:
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    section = page.split("def verify(", 1)[0].rsplit("```python\n", 1)[1]
    code = section + "def verify(" + page.split("def verify(", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(code, scope)  # the snippet receivers copy
    header = sign(SECRET, "dep:rel", BODY)
    headers = {"X-Retarget-Signature": header, "X-Retarget-Delivery": "dep:rel"}
    assert scope["verify"](SECRET, headers, BODY)
    assert not scope["verify"](SECRET, {**headers, "X-Retarget-Delivery": "dep:other"}, BODY)
    assert not scope["verify"](SECRET, headers, BODY + b" ")
