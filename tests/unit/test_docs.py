"""The README and docs/ hold together: short README, nothing pointed at outside the
repository, every relative link and anchor found, every setting of the service named
in docs/operations.md and no setting named that the service does not read.

(That their marked commands run is tests/e2e/test_docs_commands.py.)"""

from __future__ import annotations

import re
from pathlib import Path

from service.config import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.M)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_SETTING = re.compile(r"RETARGET_[A-Z0-9_]*[A-Z0-9]")
#: read by the client (the CLI and the Python client) and by the tests, not the service
NOT_SETTINGS = {"RETARGET_URL", "RETARGET_API_KEY", "RETARGET_TEST_POSTGRES_URL"}


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but `-` and `_` dropped,
    spaces as `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    prose = _FENCE.sub("", page.read_text())
    return {slug(h) for h in _HEADING.findall(prose)}


def test_slug_matches_githubs_anchors() -> None:
    assert slug('Private selection (`metric_source: "private"`)') == (
        "private-selection-metric_source-private"
    )
    assert slug("Releases, serving and the ledger") == "releases-serving-and-the-ledger"


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move the detail to docs/"


def test_nothing_points_outside_the_repository() -> None:
    code = [
        p
        for folder in ("retarget", "service", "benchmarks", "docker", "migrations")
        for p in (ROOT / folder).rglob("*")
        if p.suffix in {".py", ".md", ".html", ".toml", ".yml", ".yaml"} or p.name == "Dockerfile"
    ]
    assert code, "no source found"
    for page in [*PAGES, *code]:
        text = page.read_text()
        for outside in ("../shared", "shared/API.md", "papers/"):
            assert outside not in text, f"{page.name} points at {outside}"


def test_every_relative_link_and_anchor_exists() -> None:
    broken = []
    for page in PAGES:
        prose = _FENCE.sub("", page.read_text())
        for target in _LINK.findall(prose):
            if re.match(r"[a-z]+:", target):
                continue  # http(s):, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_setting_is_documented_and_every_documented_setting_exists() -> None:
    settings = {f"RETARGET_{name.upper()}" for name in Settings.model_fields}
    operations = set(_SETTING.findall((ROOT / "docs" / "operations.md").read_text()))
    assert settings - operations == set(), "settings missing from docs/operations.md"
    named = {s for page in PAGES for s in _SETTING.findall(page.read_text())}
    assert named - settings - NOT_SETTINGS == set(), "docs name settings that do not exist"
