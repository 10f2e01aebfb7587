"""What a llama.cpp context is made with: its parameters (one table, engine.params), the
threads, flash attention for this machine, and whether its KV cache fits in memory."""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.errors import ModelLoadError
from engine.llama.backend import lib
from engine.params import Params, param

if TYPE_CHECKING:
    from engine.llama.model import Model

log = logging.getLogger(__name__)

KV_TYPES = {"f16": lib.GGML_TYPE_F16, "q8_0": lib.GGML_TYPE_Q8_0, "f32": lib.GGML_TYPE_F32}
MAX_CTX = 1 << 24
KV_BYTES_PER_ELEMENT = {"f16": 2.0, "q8_0": 34 / 32, "f32": 4.0}


def default_threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class ContextParams(Params):
    n_ctx: int = param(4096, "Context size", "Tokens the model can attend to.", applies="load",
                       minimum=16, maximum=MAX_CTX, cli="--ctx", step=256)
    n_batch: int = param(512, "Batch size", "Most tokens decoded in one llama.cpp call.",
                         applies="load", minimum=1, maximum=MAX_CTX, cli="--batch", step=64)
    n_threads: int = param(0, "Threads", "CPU threads (0: one per core, up to 8).",
                           applies="load", minimum=0, maximum=256, cli="--threads", step=1)
    n_parallel: int = param(1, "Parallel replies", "Replies decoded together, in one batch "
                            "(they share the context's cells: memory does not grow with them).",
                            applies="load", minimum=1, maximum=64, cli="--parallel", step=1)
    type_k: str = param("f16", "KV cache type", "Precision of the KV cache: q8_0 halves its "
                        "memory at a small cost in accuracy.", applies="load",
                        choices=tuple(KV_TYPES), cli="--kv-type")
    type_v: str = param("f16", "KV cache type (values)", "Precision of the cache's values "
                        "(--kv-type sets both).", applies="load", choices=tuple(KV_TYPES),
                        cli=False)
    exact: bool = param(True, "Exact decoding", "The same request gives the same reply, "
                        "whatever drafting, caches or parallel replies do (on the CPU: flash "
                        "attention on, Q4_K alone repacked; docs/benchmarks/exact.md). Off: "
                        "llama.cpp's own kernel choices, which can change a reply at a near-tie.",
                        applies="load")
    exact_gpu: bool = param(False, "Exact on a Vulkan GPU", "Keep exact decoding with layers on "
                            "a Vulkan GPU too: there a batch's tokens share no work, so prompts "
                            "read slower (3.2x on a software device; more on a GPU) and drafts "
                            "pay less (docs/benchmarks/gpu.md). Off: layers on a GPU run "
                            "llama.cpp's own kernels, and replies are not exact.", applies="load")
    flash_attn: bool | None = None  # None: chosen for the machine and the sequences (flash_attn_type)

    def threads(self) -> int:
        """The threads to use: as asked, but never more than the cores present."""
        if self.n_threads <= 0:
            return default_threads()
        cores = os.cpu_count() or 1
        if self.n_threads > cores:
            _warn_threads(self.n_threads, cores)
            return cores
        return self.n_threads


@functools.lru_cache(maxsize=4)
def _warn_threads(asked: int, cores: int) -> None:
    log.warning("%d threads asked for but this machine has %d cores; using %d", asked, cores, cores)


def flash_attn_type(params: ContextParams, n_gpu_layers: int) -> int:
    """Flash attention: as asked; with exact decoding (the patched CPU kernel, and the Vulkan
    backend's batch-invariant mode, read a sequence's cells in order, skipping the others':
    its sums do not depend on the batch, on
    strangers' cells nor on holes left by a cache shift, where plain attention's do); needed for
    a quantized V cache; automatic with a GPU. Without exact decoding, when
    everything runs on the CPU it is off for one sequence (measured on a 2-core x86 CPU with
    the 1.5B target: a 16-token verify took 378-415 ms without it, 428-444 ms with it) and on
    for several: their cells share one cache, and the CPU kernel skips the cells of the other
    sequences where plain attention multiplies them too (the same CPU, four 450-token prompts
    then 128 steps of the four: 48.0 and 48.7 s with it, 50.9 and 50.1 s without; four short
    prompts and 256 steps: the same within noise; `scripts/profile_parallel.py --jobs 4
    --suite --flash-attn on|off`)."""
    if params.flash_attn is not None:
        return lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if params.flash_attn else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
    if params.exact and (n_gpu_layers == 0 or params.exact_gpu):
        # reads a sequence's cells alone, in order (a Vulkan GPU's batch-invariant mode too)
        return lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
    if params.type_v not in ("f16", "f32") or (n_gpu_layers == 0 and params.n_parallel > 1):
        return lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
    return lib.LLAMA_FLASH_ATTN_TYPE_DISABLED if n_gpu_layers == 0 else lib.LLAMA_FLASH_ATTN_TYPE_AUTO


def available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(model: Model, params: ContextParams) -> None:
    """Refuse a context whose KV cache could not fit in RAM, before llama.cpp tries."""
    per_token = (model.kv_bytes_per_token(KV_BYTES_PER_ELEMENT[params.type_k]) / 2
                 + model.kv_bytes_per_token(KV_BYTES_PER_ELEMENT[params.type_v]) / 2)
    need = per_token * params.n_ctx  # the sequences share its cells (engine.llama.context)
    avail = available_memory()
    if avail is not None and need > avail:
        raise ModelLoadError(
            f"a context of {params.n_ctx} tokens needs {need / 2**30:.1f} GiB for the cache but "
            f"only {avail / 2**30:.1f} GiB is free; choose a smaller context size")
