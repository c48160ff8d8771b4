"""A release as a Hugging Face Hub revision: the commit id clients cache it under.

A Hub client pins a download to a 40-hex commit id (``X-Repo-Commit``, a model's
``sha``) and caches a snapshot under it. A release never changes, so its commit is a
fixed function of its id, and back: the release id's 32 hex digits followed by 8
hex digits of a sha256 of them (a check that the commit names a release of this
service rather than any 40-hex string). A revision names a release by its id, by
this commit, or, for a deployment, as ``main``: its current release.
"""

from __future__ import annotations

import hashlib
import uuid

#: the branch a deployment serves: its current release
MAIN = "main"


def _check(hex32: str) -> str:
    return hashlib.sha256(f"retarget-release:{hex32}".encode()).hexdigest()[:8]


def commit_of(release_id: str) -> str:
    """The 40-hex commit id of a release (an id that is no UUID gets a hash of it,
    which ``release_of`` does not map back)."""
    try:
        hex32 = uuid.UUID(release_id).hex
    except ValueError:
        return hashlib.sha256(f"retarget-release-id:{release_id}".encode()).hexdigest()[:40]
    return hex32 + _check(hex32)


def release_of(revision: str) -> str | None:
    """The release id a revision names directly (an id or a commit), or None (a branch
    name such as ``main``, or nothing of ours)."""
    value = revision.strip().lower()
    if len(value) == 40 and all(c in "0123456789abcdef" for c in value):
        hex32, check = value[:32], value[32:]
        return str(uuid.UUID(hex32)) if _check(hex32) == check else None
    try:
        return str(uuid.UUID(value)) if len(value) == 36 else None
    except ValueError:
        return None
