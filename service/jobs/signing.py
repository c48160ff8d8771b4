"""HMAC-SHA256 signatures of webhook bodies: ``t=<unix>,v1=<hex of HMAC("<t>.<body>")>``."""

from __future__ import annotations

import hashlib
import hmac
import time


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    t = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(
    secret: str, body: bytes, header: str, tolerance_s: int, now: float | None = None
) -> str:
    """'' when the signature is valid and fresh, else the reason it is not."""
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        parts.setdefault(key, []).append(value)
    try:
        t = int(parts["t"][0])
    except (KeyError, ValueError):
        return "the signature header has no timestamp"
    if abs((time.time() if now is None else now) - t) > tolerance_s:
        return f"the timestamp is more than {tolerance_s} s from now"
    expected = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, v) for v in parts.get("v1", [])):
        return "the signature does not match"
    return ""
