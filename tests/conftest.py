"""Shared fixtures: the real starter models, fetched by ./test.sh into the models folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine import paths
from engine.runtime import STARTER_FILES

# Resolve the real models folder before any test points DUET_HOME elsewhere.
MODELS = paths.models_dir()
os.environ.setdefault("DUET_MODELS_DIR", str(MODELS))


def model_path(key: str) -> Path:
    path = MODELS / STARTER_FILES[key]
    if not path.exists():
        pytest.fail(f"{path} is missing: run ./test.sh (or duet-cli models fetch --group test)")
    return path


@pytest.fixture(scope="session")
def smol_path() -> Path:
    return model_path("test")


@pytest.fixture(scope="session")
def smol(smol_path):
    from engine.model import Model

    with Model(smol_path) as m:
        yield m


@pytest.fixture(scope="session")
def qwen_target():
    from engine.model import Model

    with Model(model_path("target")) as m:
        yield m


@pytest.fixture(scope="session")
def qwen_draft():
    from engine.model import Model

    with Model(model_path("draft")) as m:
        yield m


@pytest.fixture(scope="session")
def gemma():
    from engine.model import Model

    with Model(model_path("gemma")) as m:
        yield m


@pytest.fixture
def smol_ctx(smol):
    from engine.context import Context, ContextParams

    with Context(smol, ContextParams(n_ctx=1024)) as ctx:
        yield ctx
