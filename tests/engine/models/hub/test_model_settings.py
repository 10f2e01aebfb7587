"""Per-model settings: remembered by the file's identity in the config dir."""

from __future__ import annotations

import json
import shutil

import pytest

from engine import paths
from engine.runtime import model_settings as ms


@pytest.fixture
def model_file(tmp_path, monkeypatch):
    monkeypatch.setenv("DUET_HOME", str(tmp_path / "home"))
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 100)
    return path


def test_settings_come_back_for_the_same_file_even_renamed(model_file):
    assert ms.load(model_file) is None
    saved = ms.ModelSettings(n_ctx=8192, n_gpu_layers=-1, draft="/x/draft.gguf", temperature=0.2, top_k=20)
    ms.save(model_file, saved)
    assert ms.load(model_file) == saved
    moved = model_file.with_name("renamed.gguf")
    shutil.copy(model_file, moved)
    assert ms.load(moved) == saved
    assert (paths.config_dir() / ms.FILENAME).exists()


def test_another_file_has_its_own(model_file):
    ms.save(model_file, ms.ModelSettings(n_ctx=2048))
    other = model_file.with_name("other.gguf")
    other.write_bytes(model_file.read_bytes() + b"!")
    assert ms.load(other) is None


def test_a_corrupt_store_reads_as_empty_and_is_replaced(model_file):
    store = paths.config_dir() / ms.FILENAME
    store.parent.mkdir(parents=True)
    store.write_text("{not json")
    assert ms.load(model_file) is None
    ms.save(model_file, ms.ModelSettings(n_ctx=1024))
    assert json.loads(store.read_text())["version"] == ms.VERSION


def test_bad_values_are_dropped(model_file):
    ms.save(model_file, ms.ModelSettings(n_ctx=1024))
    store = paths.config_dir() / ms.FILENAME
    data = json.loads(store.read_text())
    record = next(iter(data["models"].values()))
    record["settings"]["temperature"] = "hot"
    store.write_text(json.dumps(data))
    assert ms.load(model_file) is None
