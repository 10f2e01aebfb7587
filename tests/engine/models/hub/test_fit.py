"""Fit estimates from a header read by range requests, and the verdicts."""

from __future__ import annotations

from fakehub_repos import SMOL_FILE, SMOL_REPO, TARGET_FILE, TARGET_REPO

from engine.models.hub import fit
from engine.models.hub.gguf_header import model_facts
from engine.models.hub.remote_header import remote_header

GB = 10**9
BIG = fit.Machine(ram_total=64 * GB, ram_available=32 * GB)


def test_remote_header_is_read_by_ranges_and_gives_the_figures(hub):
    h = remote_header(TARGET_REPO, TARGET_FILE)
    f = model_facts(h)
    assert (f.architecture, f.n_layer, f.n_head_kv, f.head_dim_k, f.n_vocab) == ("qwen2", 28, 2, 128, 151936)
    assert f.has_chat_template and f.n_ctx_train == 32768
    assert all(r is not None for r in hub.ranges("/cdn/"))
    # 28 KiB per token of f16 KV cache (docs: 86 MB for 3,000 tokens).
    assert fit.kv_cache_bytes(f, 3000) == 28 * 1024 * 3000


def test_estimate_counts_weights_kv_and_repacked_copies(hub):
    h = remote_header(TARGET_REPO, TARGET_FILE)
    plain = fit.estimate(h, fit.FitRequest(n_ctx=4096), BIG, repack=frozenset())
    assert 1.10 * GB < plain.weights_cpu < 1.12 * GB and plain.weights_gpu == 0
    assert plain.ram_loaded == plain.weights_cpu + plain.kv_cache + fit.OVERHEAD
    assert plain.ram_needed == plain.ram_loaded + plain.compute
    repacked = fit.estimate(h, fit.FitRequest(n_ctx=4096), BIG, repack=frozenset({fit.Q4_K}))
    # llama.cpp logs "CPU_REPACK model buffer size = 596.53 MiB" for this file.
    assert abs((repacked.weights_cpu - plain.weights_cpu) - 596.53 * 2**20) < 2**20
    assert repacked.weights_repacked == repacked.weights_cpu - plain.weights_cpu and plain.weights_repacked == 0
    bigger = fit.estimate(h, fit.FitRequest(n_ctx=16384), BIG, repack=frozenset())
    assert bigger.kv_cache == 4 * plain.kv_cache


def test_verdicts(hub):
    h = remote_header(SMOL_REPO, SMOL_FILE)
    assert fit.estimate(h, fit.FitRequest(), BIG).verdict == fit.FITS
    need = fit.estimate(h, fit.FitRequest(), BIG).ram_needed
    tight = fit.estimate(h, fit.FitRequest(), fit.Machine(GB, int(need / 0.9)))
    assert tight.verdict == fit.TIGHT and "available" in tight.reason
    small = fit.estimate(h, fit.FitRequest(), fit.Machine(GB, need // 2))
    assert small.verdict == fit.WONT_FIT and small.reason.startswith("won't fit: needs")


def test_gpu_offload_moves_layers_to_vram(hub):
    h = remote_header(TARGET_REPO, TARGET_FILE)
    box = fit.Machine(64 * GB, 32 * GB, vram_total=8 * GB)
    half = fit.estimate(h, fit.FitRequest(n_gpu_layers=14), box, repack=frozenset())
    full = fit.estimate(h, fit.FitRequest(n_gpu_layers=-1), box, repack=frozenset())
    assert 0 < half.weights_gpu < full.weights_gpu
    assert full.weights_cpu > 0  # the token embeddings stay on the CPU
    assert full.vram_needed == full.weights_gpu + full.kv_cache + full.compute
    unknown = fit.estimate(h, fit.FitRequest(n_gpu_layers=-1), BIG)
    assert "not known here" in unknown.reason


def test_the_gpus_free_memory_decides_where_the_driver_says_it(hub):
    """What the device reports free (engine.llama.devices.gpu_memory) is what must hold the
    offloaded part; its total alone is the fallback."""
    h = remote_header(TARGET_REPO, TARGET_FILE)
    need = fit.estimate(h, fit.FitRequest(n_gpu_layers=-1), BIG).vram_needed
    roomy = fit.estimate(h, fit.FitRequest(n_gpu_layers=-1), fit.machine((4 * need, 8 * need)))
    assert roomy.verdict == fit.FITS and roomy.vram_total == 8 * need
    assert f"free of {fit._gb(8 * need)}" in roomy.reason
    busy = fit.estimate(h, fit.FitRequest(n_gpu_layers=-1), fit.machine((need // 2, 8 * need)))
    assert busy.verdict == fit.WONT_FIT


def test_a_build_without_a_gpu_reports_no_gpu_memory():
    from engine.llama.devices import gpu_memory, gpus

    assert gpus() or gpu_memory() is None
