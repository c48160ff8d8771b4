"""Model references taken apart, close names, and the client's paths for names."""

from __future__ import annotations

import pytest

from retarget.client.naming import model_path, segment, split_ref
from service.errors import InvalidInput
from service.registry.names import (
    ModelRef,
    close_names,
    looks_like_id,
    parse_model_ref,
    version_of,
)


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [
        ("digits/sigma1.2@3", ModelRef("digits", "sigma1.2", "3")),
        ("digits/sigma1.2", ModelRef("digits", "sigma1.2", "latest")),
        ("sigma1.2@champion", ModelRef(None, "sigma1.2", "champion")),
        ("sigma", ModelRef(None, "sigma", "latest")),
        # a name with '@' from before the rule: the last '@' starts the selector
        ("ds/a@b@latest", ModelRef("ds", "a@b", "latest")),
        # dataset names hold no '/': the first one splits, the rest is the model's
        ("ds/x/y", ModelRef("ds", "x/y", "latest")),
    ],
)
def test_references_split_one_way(ref: str, parsed: ModelRef) -> None:
    assert parse_model_ref(ref) == parsed


@pytest.mark.parametrize("ref", ["/m", "ds/", "m@", "@m", "ds/@3", "ds/m@"])
def test_references_with_an_empty_part_are_refused(ref: str) -> None:
    with pytest.raises(InvalidInput, match="not a model reference"):
        parse_model_ref(ref)


@pytest.mark.parametrize(
    ("selector", "version"),
    [
        ("1", 1),
        ("0042", 42),
        ("2147483647", 2**31 - 1),
        ("2147483648", None),
        ("99999999999999999999", None),
        ("３", None),
        ("²", None),
        ("latest", None),
    ],
)
def test_only_ascii_versions_an_integer_column_holds_are_versions(
    selector: str, version: int | None
) -> None:
    assert version_of(selector) == version


def test_close_names_prefer_the_same_name_in_another_case() -> None:
    names = ["digits", "Digits-v2", "cifar10", "mnist"]
    assert close_names("DIGITS", names)[0] == "digits"
    assert close_names("digit", names)[0] == "digits"
    assert close_names("cifar", names) == ["cifar10"]
    assert close_names("imagenet", names) == []
    assert len(close_names("d", ["d" + str(i) for i in range(100)])) <= 3


def test_ids_are_told_from_names() -> None:
    assert looks_like_id("0b9a6f4e-3c1d-4e8a-9f2b-7d6c5e4a3b21")
    assert not looks_like_id("digits")
    assert not looks_like_id("0b9a6f4e3c1d4e8a9f2b7d6c5e4a3b21")  # no dashes: a name


def test_the_client_puts_names_in_one_path_segment_each() -> None:
    assert split_ref("0b9a6f4e-3c1d-4e8a-9f2b-7d6c5e4a3b21") is None
    assert split_ref("digits/sigma1.2@3") == ("digits", "sigma1.2@3")
    assert model_path("abc") == "/v1/models/abc"
    assert model_path("digits/sigma 1.2@champion") == (
        "/v1/datasets/digits/models/sigma%201.2%40champion"
    )
    assert model_path("a?b/c#d") == "/v1/datasets/a%3Fb/models/c%23d"
    assert segment("..") == "%2E%2E" and segment(".") == "%2E" and segment("a.b") == "a.b"
    with pytest.raises(ValueError, match="not a model reference"):
        split_ref("digits/")


def test_close_names_hand_difflib_a_short_list_of_short_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """difflib's ratio is quadratic in the length: an unknown name compared with 1,000
    long, alike names must not cost 1,000 long comparisons."""
    import difflib

    from service.registry import names as module

    seen: list[list[str]] = []
    real = difflib.get_close_matches

    def spy(word: str, possibilities: list[str], n: int, cutoff: float) -> list[str]:
        seen.append(list(possibilities))
        assert len(word) <= module.COMPARED_CHARS
        return real(word, possibilities, n=n, cutoff=cutoff)

    monkeypatch.setattr(module.difflib, "get_close_matches", spy)
    alike = ["ab" * 100 + str(i) for i in range(module.SUGGESTION_SCAN)]
    close_names("ab" * 99 + "x", alike)
    (possibilities,) = seen
    assert len(possibilities) <= module.SHORTLIST
    assert all(len(p) <= module.COMPARED_CHARS for p in possibilities)
    # the shortlist keeps what a person would want suggested
    assert close_names("sigma1.3", ["other", *[f"run-{i}" for i in range(999)], "sigma1.2"]) == [
        "sigma1.2"
    ]
