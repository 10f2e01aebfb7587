"""A fake Hub on a loopback port per test, with the real starter models behind it.

``huggingface_hub`` is pointed at it (HF_ENDPOINT, and its import-time ENDPOINT constant, so not
even its background lookups leave the machine); HF_HOME is a temporary folder; offline mode and
any token from the environment are cleared.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakehub import FakeFile, FakeHub, FakeRepo, sha256_of
from fakehub_repos import (
    DRAFT_FILE,
    DRAFT_REPO,
    GATED_REPO,
    GEMMA_FILE,
    GEMMA_REPO,
    SMALL_FILE,
    SMALL_REPO,
    SMOL_FILE,
    SMOL_REPO,
    TARGET_FILE,
    TARGET_REPO,
)
from huggingface_hub import constants

from engine.models.catalog import CATALOG
from tests.conftest import model_path


def real_file(key: str, name: str) -> FakeFile:
    return FakeFile(name, model_path(key), CATALOG[key].sha256)


@pytest.fixture
def small_file(tmp_path_factory) -> Path:
    """The first 3 MB of the SmolLM2 file: enough for download tests, quick to move and hash."""
    path = tmp_path_factory.mktemp("src") / "small.gguf"
    with open(model_path("test"), "rb") as src, open(path, "wb") as out:
        out.write(src.read(3 << 20))
    return path


@pytest.fixture
def hub(monkeypatch, tmp_path, small_file):
    h = FakeHub()
    h.add(FakeRepo(SMOL_REPO, [real_file("test", SMOL_FILE)], downloads=300, likes=7))
    h.add(FakeRepo(TARGET_REPO, [real_file("target", TARGET_FILE)], downloads=900, likes=50))
    h.add(FakeRepo(DRAFT_REPO, [real_file("draft", DRAFT_FILE)], downloads=400))
    h.add(FakeRepo(GEMMA_REPO, [real_file("gemma", GEMMA_FILE)], licence="gemma", downloads=200))
    h.add(FakeRepo(GATED_REPO, [FakeFile("gated-Q8_0.gguf", small_file, sha256_of(small_file))],
                   gated="manual", licence="llama3.2", downloads=10))
    h.add(FakeRepo(SMALL_REPO, [FakeFile(SMALL_FILE, small_file, sha256_of(small_file))], downloads=1))
    h.start()
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", h.url)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield h
    h.stop()


@pytest.fixture
def split_repo(hub, tmp_path, small_file):
    """A repository whose model is split in three parts (slices of the small file)."""
    data = small_file.read_bytes()
    third = len(data) // 3 + 1
    files = []
    for i in range(3):
        part = tmp_path / f"part{i}"
        part.write_bytes(data[i * third:(i + 1) * third])
        files.append(FakeFile(f"Q4_1/split-Q4_1-{i + 1:05d}-of-00003.gguf", part, sha256_of(part)))
    files.append(FakeFile("lonely-Q8_0-00001-of-00002.gguf", small_file, sha256_of(small_file)))  # part 2 missing
    return hub.add(FakeRepo("test/split-GGUF", files))


@pytest.fixture
def dest(tmp_path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    return d



