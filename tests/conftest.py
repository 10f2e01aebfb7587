"""Shared fixtures: the real starter models, fetched by ./test.sh into the models folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine import paths
from engine.runtime.runtime import STARTER_FILES

# Resolve the real models folder before any test points DUET_HOME elsewhere.
MODELS = paths.models_dir()
# How long a client waits for a reply: as long as pytest lets a test run (pyproject's timeout).
# A reply's time is the machine's, which a busy machine multiplies; no test may budget it.
REPLY_WAIT_S = 600
os.environ.setdefault("DUET_MODELS_DIR", str(MODELS))
os.environ.setdefault("DUET_CHECK_OWNER", "1")  # entry points assert their owner thread (engine.decode.owner)


@pytest.fixture(autouse=True)
def own_kv_store(tmp_path_factory, monkeypatch):
    """Each test its own disk KV store (engine.cache.kv_store): a prompt one test read is not
    restored in another (tests that count prefilled tokens would depend on their order)."""
    monkeypatch.setenv("DUET_KV_DIR", str(tmp_path_factory.mktemp("kv")))


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
    from engine.llama.model import Model

    with Model(smol_path) as m:
        yield m


@pytest.fixture(scope="session")
def qwen_target():
    from engine.llama.model import Model

    with Model(model_path("target")) as m:
        yield m


@pytest.fixture(scope="session")
def qwen_draft():
    from engine.llama.model import Model

    with Model(model_path("draft")) as m:
        yield m


@pytest.fixture(scope="session")
def gemma():
    from engine.llama.model import Model

    with Model(model_path("gemma")) as m:
        yield m


@pytest.fixture(scope="session")
def smol_projector(tmp_path_factory) -> Path:
    """The seeded test projector (LLaVA ``mlp``, 16 positions an image) for SmolLM2's width."""
    from tests.images import write_projector

    return write_projector(tmp_path_factory.mktemp("mmproj") / "mmproj-smollm2-test.gguf", 576)


@pytest.fixture(scope="session")
def smol_vision(smol_path, smol_projector):
    """SmolLM2 with the test projector: a model that reads images (its own instance: ``smol``
    stays text-only)."""
    from engine.llama.model import Model
    from engine.llama.projector import Projector

    with Model(smol_path) as m:
        Projector(m, smol_projector, n_threads=2)
        yield m


@pytest.fixture
def smol_ctx(smol):
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams

    with LlamaSequence(smol, ContextParams(n_ctx=1024)) as ctx:
        yield ctx


@pytest.fixture(scope="session")
def same_tokens():
    """``check(model, prompt, got, want)``: the token ids are equal. Decoding is exact
    (patches/ggml-exact.patch, ContextParams.exact): a prompt read in another batch shape (a
    cached prefix, RPC layers, a verify batch, other sequences beside it) gives the same
    logits, so there is no near-tie to excuse a difference."""

    def check(model, prompt, got, want, scores=None) -> None:
        got, want = list(got), list(want)
        i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        assert got == want, f"the replies part at token {i} of {len(want)}"

    return check


@pytest.fixture
def released(monkeypatch):
    """This process as a build of llama.cpp as released: the patch's marker is not found."""
    from engine.llama import exactness as ex

    monkeypatch.setattr(ex, "patched_kernels", lambda: False)
    ex._build.cache_clear()
    yield
    ex._build.cache_clear()
