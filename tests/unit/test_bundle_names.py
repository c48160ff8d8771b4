"""Bundle file names that one filesystem or another cannot hold apart or at all: names
that differ only by case, Windows device names, trailing dots. Each is refused, naming
the file."""

from __future__ import annotations

import pytest

from service.errors import InvalidUpload
from service.formats.bundles import bundle_kind

REFUSED = [
    (["model.safetensors", "config.json", "CONFIG.json"], "CONFIG.json"),
    (["model.safetensors", "Model.safetensors"], "Model.safetensors"),
    (["model.safetensors", "tok/vocab.json", "TOK/Vocab.JSON"], "TOK/Vocab.JSON"),
    (["model.safetensors", "a.json", "A.JSON/b.json"], "A.JSON/b.json"),
    (["model.safetensors", "x/b.json", "X.json"], None),  # a file and another folder: fine
    (["CON.safetensors"], "CON.safetensors"),
    (["model.safetensors", "nul.json"], "nul.json"),
    (["model.safetensors", "aux"], "aux"),
    (["model.safetensors", "Aux.txt"], "Aux.txt"),
    (["model.safetensors", "prn.json"], "prn.json"),
    (["model.safetensors", "com1.json"], "com1.json"),
    (["model.safetensors", "COM9.txt"], "COM9.txt"),
    (["model.safetensors", "lpt1.json"], "lpt1.json"),
    (["model.safetensors", "lpt9.safetensors.index.json"], "lpt9.safetensors.index.json"),
    (["model.safetensors", "con/config.json"], "con/config.json"),
    (["model.safetensors", "config.json."], "config.json."),
    (["model.safetensors", "config.json "], "config.json "),
    (["model.safetensors", "dir./config.json"], "dir./config.json"),
]


@pytest.mark.parametrize(("paths", "culprit"), REFUSED)
def test_names_that_collide_or_windows_reserves_are_refused_naming_the_file(
    paths: list[str], culprit: str | None
) -> None:
    if culprit is None:
        assert bundle_kind(paths) == "hf_bundle"
        return
    with pytest.raises(InvalidUpload) as err:
        bundle_kind(paths)
    assert repr(culprit) in str(err.value)


@pytest.mark.parametrize(
    "paths",
    [
        ["model.safetensors", "config.json", "tokenizer.json", "console.json", "nullable.txt"],
        ["model.safetensors", "com10.json", "lpt.json", "auxiliary/config.json"],
        ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
    ],
)
def test_names_near_the_reserved_ones_are_accepted(paths: list[str]) -> None:
    assert bundle_kind(paths) == "hf_bundle"
