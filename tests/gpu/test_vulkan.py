"""Duet's own paths with every layer on a GPU device (issue 75): no native crash in calibration,
drafting, rewinds after multi-row passes, parallel sequences, sessions or the server, and
``exact`` reported false with its reason.

These need a llama.cpp built with a GPU backend and a device: ``./test.sh`` runs them with the
Vulkan build (``scripts/gpu_tests.sh``: Mesa's lavapipe where no GPU is installed) wherever
a Vulkan device and the tools to build for it exist. In the CPU build's run they are skipped,
saying so: that build has nothing to offload to.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli.main import main
from engine.llama.devices import gpus
from tests.gpu.serving import at_once, two_sequences

pytestmark = [
    pytest.mark.skipif(not gpus(), reason="no GPU device in this llama.cpp build "
                       "(./test.sh runs these with the Vulkan build where it can)"),
    # a safety net, not a budget: lavapipe runs a GPU's shaders on 2 busy cores (a model's
    # first load compiles them), and one of these took 10 minutes beside four builds
    pytest.mark.timeout(3600),
]

ROOT = Path(__file__).resolve().parents[2]
ALL = "-1"  # every layer on the device


@pytest.fixture(scope="module", autouse=True)
def home(tmp_path_factory):
    """Caches and the verify-cost calibration in a folder of their own: a calibration measured
    on the CPU build is not this device's, and this module must run the calibration."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DUET_HOME", str(tmp_path_factory.mktemp("gpu-home")))
        yield


@pytest.fixture(scope="module", autouse=True)
def short_calibration():
    """The verify-cost calibration at four batch sizes instead of twelve: the same multi-row
    passes after a rewind at the same depth (the path issue 75 found), in a third of the time
    (lavapipe runs a GPU's shaders on the CPU: the full curve took over 20 minutes on 2 busy
    cores)."""
    from dataclasses import replace

    from engine.decode.speculative import speculator

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(speculator, "TUNING", replace(speculator.TUNING, calibration_sizes=(1, 2, 4, 16)))
        yield


def cli(capsys, *argv: str) -> dict:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_rewind_after_a_multi_row_pass(smol):
    """The crash issue 75 found, at its smallest: 512 cells, a pass whose every row is read, a
    rewind, and a pass of two rows read whole. On lavapipe with the Vulkan backend's fused
    operations, the driver's worker thread died in the second pass (engine/llama/devices.py)."""
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.model import Model, ModelSpec

    filler = [1] + [100 + i for i in range(600)]
    with Model(ModelSpec(smol.path, n_gpu_layers=-1)) as m, LlamaSequence(m, ContextParams()) as ctx:
        for s in range(0, 512, 64):
            ctx.decode(filler[s:s + 64])
        ctx.rewind(512)
        ctx.decode(filler[512:513], logits="all")
        ctx.logits_rows()
        ctx.rewind(512)
        ctx.decode(filler[512:514], logits="all")
        rows = ctx.logits_rows()
    assert len(rows) == 2 and all(math.isfinite(float(r.max())) for r in rows)


def test_generate_calibrates_drafts_and_says_it_is_not_exact(capsys, smol_path):
    """The path issue 75 reported: the verify-cost calibration's multi-row passes, then a reply
    drafted by prompt lookup, every layer on the device."""
    out = cli(capsys, "generate", "--model", str(smol_path), "--gpu-layers", ALL, "--json",
              "--temperature", "0", "--max-tokens", "16", "--drafter", "ngram",
              "Repeat after me: red, green, blue. red, green, blue.")
    assert out["n_tokens"] > 0 and out["stats"]["drafter"] == "ngram"
    assert out["exact"] is False and "GPU" in out["exact_reason"]


def test_a_draft_model_on_the_device(capsys, smol_path):
    out = cli(capsys, "generate", "--model", str(smol_path), "--draft", str(smol_path),
              "--drafter", "model", "--gpu-layers", ALL, "--draft-gpu-layers", ALL, "--json",
              "--temperature", "0", "--max-tokens", "12", "Name three colours.")
    assert out["n_tokens"] > 0 and out["stats"]["proposed"] > 0


def test_a_session_written_on_the_device_reopens_on_the_cpu_build(capsys, smol_path, tmp_path):
    """Two turns on the device, the second restoring the first's KV state; then the CPU
    build (./test.sh's .venv) continues the same file. Another backend's kernels give other
    logits, so the saved state's check fails there and the conversation is read again from its
    text, saying so: no reply is built on cells another build computed."""
    session = tmp_path / "chat.duet"
    args = ("--model", str(smol_path), "--gpu-layers", ALL, "--json", "--temperature", "0",
            "--max-tokens", "8", "--drafter", "none", "--session", str(session))
    first = cli(capsys, "generate", *args, "Name a colour.")
    second = cli(capsys, "generate", *args, "And another one?")
    assert first["n_tokens"] > 0 and second["session"]["restored_kv"] is True
    assert second["n_cached_tokens"] > 0

    cpu = ROOT / ".venv" / "bin" / "duet-cli"
    if Path(sys.prefix).resolve() == (ROOT / ".venv").resolve() or not cpu.exists():
        pytest.fail(f"the CPU build's {cpu} is needed beside this one (./test.sh makes it)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VK")}
    done = subprocess.run([str(cpu), "generate", "--model", str(smol_path), "--json",
                           "--temperature", "0", "--max-tokens", "8", "--drafter", "none",
                           "--session", str(session), "One more?"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    third = json.loads(done.stdout)
    assert third["n_tokens"] > 0 and third["exact"] is True
    assert third["session"]["restored_kv"] is False and third["session"]["note"]


def test_the_server_answers_two_sequences_at_once(smol_path):
    """Two clients at once on one context of two sequences, every layer on the device, and the
    fingerprint naming a GPU build and an inexact reply."""
    from engine.llama.context_params import ContextParams

    with two_sequences(smol_path, ContextParams(n_ctx=1024, n_parallel=2)) as (client, model_id):
        replies = at_once(client, model_id, ["Name a fruit.", "Name an animal."])
    for r in replies:
        assert r is not None and r.choices[0].message.content
        assert r.system_fingerprint.startswith("duet-inexact-")
        assert r.system_fingerprint.endswith("-gpu")


@pytest.fixture(scope="module")
def device_smol(smol_path):
    """SmolLM2 with every layer on the device."""
    from engine.llama.model import Model, ModelSpec

    with Model(ModelSpec(smol_path, n_gpu_layers=-1)) as m:
        yield m


def test_partly_offloaded_calibrates_and_drafts(capsys, smol_path):
    """Ten of SmolLM2's 30 layers on the device and the rest on the CPU: a pass crosses both
    backends, in the calibration's multi-row passes and in drafted verifies."""
    out = cli(capsys, "generate", "--model", str(smol_path), "--gpu-layers", "10", "--json",
              "--temperature", "0", "--max-tokens", "16", "--drafter", "ngram",
              "Repeat after me: red, green, blue. red, green, blue.")
    assert out["n_tokens"] > 0 and out["stats"]["drafter"] == "ngram"
    assert out["exact"] is False and "GPU" in out["exact_reason"]


def test_the_memory_cache_and_the_disk_store_keep_device_states(device_smol, tmp_path):
    """A conversation left for another is saved from the device and restored there (the memory
    cache); a fresh store over the same folder (another process) restores a long prompt read
    once instead of reading it again."""
    from engine.cache.kv_store import KVStore
    from engine.cache.state_cache import StateCache
    from engine.decode.sampling import SamplingParams
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.runtime.generate import Generator

    greedy = SamplingParams(temperature=0, max_tokens=6)
    doc = " ".join(f"Line {i}: valve {i} is set to {i * 7 % 13} turns." for i in range(40))
    a = device_smol.tokenize(doc + "\nQuestion: which valve is set to 5 turns?\nAnswer:")
    b = device_smol.tokenize("Another text entirely. " * 30 + "\nSummary:")
    with LlamaSequence(device_smol, ContextParams(n_ctx=2048)) as ctx:
        store = KVStore(tmp_path, [ctx], ["fp-device-smol"])
        cache = StateCache(256 << 20, disk=store)
        gen = Generator.alone(ctx, cache=cache)
        for prompt in (a, b, a + device_smol.tokenize(" Valve", add_special=False)):
            done = list(gen.complete(prompt, greedy))[-1]
            assert done.token_ids
        assert cache.stats.saves >= 1 and cache.stats.restores >= 1
        assert done.stats.n_cached_tokens >= len(a) - 1
        store.flush()
    with LlamaSequence(device_smol, ContextParams(n_ctx=2048)) as ctx:
        store = KVStore(tmp_path, [ctx], ["fp-device-smol"])
        again = a[:-1] + device_smol.tokenize(" How many turns is valve 3 set to?", add_special=False)
        done = list(Generator.alone(ctx, cache=StateCache(0, disk=store)).complete(again, greedy))[-1]
    assert store.restores == 1 and done.stats.n_cached_tokens >= len(a) - 2 and done.token_ids


def test_embeddings_on_the_device(smol_path):
    """Sentence vectors from the dedicated MiniLM and from the chat model, every layer on the
    device: unit length, and a paraphrase closer than an unrelated sentence."""
    import numpy as np

    from engine.documents.embeddings import Embedder
    from engine.llama.model import Model, ModelSpec
    from tests.conftest import model_path

    for path in (model_path("embed"), smol_path):
        with Model(ModelSpec(path, n_gpu_layers=-1)) as m, Embedder(m) as e:
            a, near, far = e.embed(["The new movie is awesome.", "The new movie is so great.",
                                    "The cat sits outside."])
        assert np.allclose([np.linalg.norm(v) for v in (a, near, far)], 1, atol=1e-3)
        assert float(a @ near) > float(a @ far), path.name


def test_the_fit_advice_reads_the_devices_memory(device_smol):
    """The memory the window and `duet-cli hub files --fit` weigh offloaded layers against is
    what the device reports (lavapipe: the host's), free and in all."""
    from engine.llama.devices import gpu_memory
    from engine.models.hub import fit

    memory = gpu_memory()
    assert memory is not None and 0 < memory[0] <= memory[1]
    box = fit.machine(memory)
    assert box.vram_total == memory[1] and box.vram_free == memory[0]
