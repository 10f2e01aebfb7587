"""``exact`` as reported: true where the build's kernels and the placement keep it, false with the
reason everywhere else (issue 75), in the command line's JSON, the server's model list, its
replies' system_fingerprint and Ollama's /api/show."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from engine.cli.main import main as cli
from engine.errors import ModelLoadError
from engine.llama import exactness as ex
from engine.llama.devices import Device
from engine.llama.model import Model, ModelSpec, for_decoding
from tests.conftest import model_path

PROMPT = ["--max-tokens", "2", "--temperature", "0", "--drafter", "none", "--json", "Hi."]


def test_this_build_has_the_patched_kernels():
    """test.sh builds with patches/ggml-exact.patch: its marker is there (DUET_EXACT_KERNELS=0
    builds as released, where this test is the one expected to fail)."""
    assert ex.patched_kernels()
    assert ex.exactness(True) == ex.Exactness(True)
    assert ex.exactness(True).fingerprint.startswith("duet-exact-patched-")


def test_why_decoding_is_not_exact(released):
    assert ex.exactness(False).reason == "exact decoding is off"
    got = ex.exactness(True)
    assert not got.exact and "lacks Duet's batch-invariant kernels" in got.reason
    assert got.fingerprint.startswith("duet-inexact-released-")


def test_layers_on_a_gpu_are_exact_only_on_vulkan_when_asked(monkeypatch):
    """CUDA and Metal run llama.cpp's kernels; a Vulkan build with Duet's batch-invariant mode
    keeps exact when exact_gpu asks for it, with an f16 cache (tests/gpu run it for real)."""
    monkeypatch.setattr(ex, "has_gpu", lambda: True)
    monkeypatch.setattr(ex, "gpus", lambda: (Device("CUDA0", "a GPU", "gpu"),))
    got = ex.exactness(True, n_gpu_layers=-1, on_gpu=True)
    assert not got.exact and "as llama.cpp ships them" in got.reason
    assert ex.exactness(True, n_gpu_layers=0).exact  # all on the CPU
    monkeypatch.setattr(ex, "gpus", lambda: (Device("Vulkan0", "a GPU", "gpu"),))
    monkeypatch.setattr(ex, "vulkan_invariant", lambda: True)
    assert "a setting of its own (exact_gpu)" in ex.exactness(True, -1).reason
    assert ex.exactness(True, -1, on_gpu=True) == ex.Exactness(True)
    assert "f16" in ex.exactness(True, -1, ("q8_0", "q8_0"), on_gpu=True).reason
    assert "mixture-of-experts" in ex.exactness(True, -1, on_gpu=True, experts=True).reason
    monkeypatch.setattr(ex, "vulkan_invariant", lambda: False)
    assert "lacks Duet's batch-invariant mode" in ex.exactness(True, -1, on_gpu=True).reason


def test_the_command_line_reports_it(smol_path, capsys):
    assert cli(["generate", "--model", str(smol_path), *PROMPT]) == 0
    assert json.loads(capsys.readouterr().out)["exact"] is True
    assert cli(["generate", "--model", str(smol_path), "--no-exact", *PROMPT]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["exact"], out["exact_reason"]) == (False, "exact decoding is off")


def test_the_command_line_reports_a_released_build(smol_path, capsys, released):
    assert cli(["generate", "--model", str(smol_path), *PROMPT]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exact"] is False and "lacks" in out["exact_reason"]


def test_exact_decoding_repacks_only_the_layouts_that_keep_it(monkeypatch):
    """for_decoding: every repacked layout when decoding need not be exact, the switch's (Q4_K on
    x86) when it must, none in a build without the batch-invariant kernels; a spec that names
    its layouts keeps them, and any other name is a one-line error."""
    spec = ModelSpec(Path("m.gguf"))
    assert for_decoding(spec, exact=False).repack == "all"
    assert for_decoding(spec, exact=True).repack == "exact"
    assert for_decoding(replace(spec, repack="all"), exact=True).repack == "all"
    monkeypatch.setattr(ex, "patched_kernels", lambda: False)  # a build as released
    assert for_decoding(spec, exact=True).repack == "none"
    with pytest.raises(ModelLoadError, match="repack must be one of none, exact, all, not 'some'"):
        Model(ModelSpec(model_path("draft"), repack="some"))
