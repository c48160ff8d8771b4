"""HMAC-SHA256 signatures of webhooks, in and out.

Header ``X-Retarget-Signature: t=<unix seconds>,v1=<hex>`` where the hex is
``HMAC-SHA256(secret, "<t>.<delivery id>.<body>")``: the timestamp, the delivery id
(header ``X-Retarget-Delivery``) and the raw body bytes, joined by dots. Covering the
delivery id means a captured webhook cannot be replayed under a fresh id (the id is
what makes a replay idempotent); covering the timestamp bounds how long a capture is
worth anything. A delivery id is 1-200 visible ASCII characters without a dot, so the
signed string splits one way only. Several ``v1=`` entries may be sent (secret
rotation); one match is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

DELIVERY_ID = re.compile(r"^[\x21-\x2d\x2f-\x7e]{1,200}$")


def signed_bytes(timestamp: int, delivery: str, body: bytes) -> bytes:
    return f"{timestamp}.{delivery}.".encode() + body


def _mac(secret: str, timestamp: int, delivery: str, body: bytes) -> str:
    return hmac.new(
        secret.encode(), signed_bytes(timestamp, delivery, body), hashlib.sha256
    ).hexdigest()


def sign(secret: str, delivery: str, body: bytes, timestamp: int | None = None) -> str:
    """The ``X-Retarget-Signature`` header value for this delivery and body."""
    if not DELIVERY_ID.match(delivery):
        raise ValueError(f"a delivery id is 1-200 visible ASCII characters, no dot: {delivery!r}")
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={_mac(secret, t, delivery, body)}"


def signed_timestamp(header: str) -> int | None:
    """The ``t=`` of a signature header (None when it has none)."""
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        if key == "t":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def verify(
    secret: str,
    delivery: str,
    body: bytes,
    header: str,
    tolerance_s: int,
    now: float | None = None,
) -> str:
    """'' when the signature is valid and fresh, else the reason it is not."""
    if not DELIVERY_ID.match(delivery):
        return "the delivery id must be 1-200 visible ASCII characters without a dot"
    t = signed_timestamp(header)
    if t is None:
        return "the signature header has no timestamp"
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return f"the timestamp is more than {tolerance_s} s from now"
    expected = _mac(secret, t, delivery, body)
    offered = [
        value
        for key, _, value in (item.strip().partition("=") for item in header.split(","))
        if key == "v1"
    ]
    mine = expected.encode()
    if not any(hmac.compare_digest(mine, v.encode("utf-8", "replace")) for v in offered):
        return "the signature does not match"
    return ""
