"""The models folder: downloads kept as publisher/repo/file are found and named by their path."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import models as cli_models
from engine.models.catalog import CATALOG
from engine.models.folder import MAX_DEPTH, label, local_models, starter_name

STARTER = CATALOG["test"]


def gguf(path: Path, size: int = 100) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + bytes(size - 4))
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A starter at the top, a download of the same name from a repository, a split model,
    a partial download, a hidden cache and a file the person put in a folder of their own."""
    models = tmp_path / "models"
    gguf(models / STARTER.filename)
    gguf(models / "bartowski" / "SmolLM2-GGUF" / STARTER.filename)
    for i in (1, 2, 3):
        gguf(models / "test" / "split-GGUF" / "Q4_1" / f"split-Q4_1-0000{i}-of-00003.gguf")
    gguf(models / "test" / "small-GGUF" / "small.gguf.part")
    gguf(models / ".cache" / "huggingface" / "x.gguf")
    gguf(models / "mine" / "Notes.GGUF")
    (models / "readme.txt").write_text("not a model")
    return models


def test_local_models_are_found_in_every_repository_folder(folder: Path) -> None:
    assert [p.relative_to(folder).as_posix() for p in local_models(folder)] == [
        "bartowski/SmolLM2-GGUF/" + STARTER.filename, "mine/Notes.GGUF",
        STARTER.filename, "test/split-GGUF/Q4_1/split-Q4_1-00001-of-00003.gguf"]
    deep = gguf(folder.joinpath(*[f"d{i}" for i in range(MAX_DEPTH + 1)], "deep.gguf"))
    assert deep not in local_models(folder)
    assert local_models(folder / "nowhere") == []


def test_each_model_is_named_by_its_place(folder: Path, tmp_path: Path) -> None:
    top = folder / STARTER.filename
    hub_copy = folder / "bartowski" / "SmolLM2-GGUF" / STARTER.filename
    assert label(top, folder) == STARTER.display_name == starter_name(top, folder)
    assert label(hub_copy, folder) == f"bartowski/SmolLM2-GGUF/{STARTER.filename}"
    assert starter_name(hub_copy, folder) is None
    assert label(tmp_path / "elsewhere" / "m.gguf", folder) == "m.gguf"


def test_models_list_shows_the_downloads_by_repository(folder: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DUET_MODELS_DIR", str(folder))
    assert cli_models.main(["list"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    others = sorted(row.split()[1] for row in rows if row.startswith("-"))
    assert others == ["bartowski/SmolLM2-GGUF/" + STARTER.filename, "mine/Notes.GGUF",
                      "test/split-GGUF/Q4_1/split-Q4_1-00001-of-00003.gguf"]
    test_row = next(row for row in rows if row.startswith("test "))
    assert test_row.split()[-1] == str(folder / STARTER.filename)  # the starter keeps its place
