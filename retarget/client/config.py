"""Where the service is and the key to use: arguments first, then the environment."""

from __future__ import annotations

import os

#: Where ``retarget serve`` listens by default.
DEFAULT_URL = "http://127.0.0.1:8000"


def resolve(url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    """The base URL (``RETARGET_URL``) and the headers carrying the key
    (``RETARGET_API_KEY``; none when neither is given)."""
    base = (url or os.environ.get("RETARGET_URL") or DEFAULT_URL).rstrip("/")
    key = api_key if api_key is not None else os.environ.get("RETARGET_API_KEY")
    headers = {"Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key.strip()}"
    return base, headers
