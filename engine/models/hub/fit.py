"""Will it fit? Memory for weights + KV cache + compute buffers, from a GGUF header, against this machine.

The estimate mirrors what llama.cpp allocates when Duet loads a model (engine/llama/model.py, mmap) and
creates a context (engine/llama/context.py: f16 KV cache, n_ubatch 512, no flash attention on CPU):

- weights: the tensors' data, split by layer (``blk.N.*``) between CPU and GPU by ``n_gpu_layers``;
  the token embeddings stay on the CPU; the output layer goes to the GPU with the last layer;
- repacked weights: on x86 with AVX2, llama.cpp copies the CPU-side matrices of some types (Q4_0,
  Q4_K, IQ4_NL, MXFP4; Q2_K with AVX-512; with exact decoding Q4_K alone, the one layout whose
  batches sum a row as a lone row does) into an interleaved layout (its CPU_REPACK buffer) while
  the mapped file pages stay resident, so those bytes count twice (measured: Qwen2.5 1.5B Q4_K_M
  holds 1.06 GiB mapped + 0.58 GiB repacked);
- KV cache: ``n_ctx × layers × n_head_kv × (head_dim_k + head_dim_v) × 2 bytes`` (f16), sliding-window
  layers (Gemma 3) hold ``min(n_ctx, window + n_ubatch)`` cells;
- compute buffer: ggml's allocator reuses memory between graph steps, so its size is the largest
  step: the logits of one micro-batch (``n_vocab × n_ubatch × 4``) or one layer's attention scores
  (``n_ctx × n_ubatch × n_head × 4``), plus the activations (``n_embd × n_ubatch × 4`` times a small
  factor). It is allocated at load but only becomes resident at the first decode, so the estimate
  gives both ``ram_loaded`` (after loading) and ``ram_needed`` (once generating);
- a fixed overhead for the backend's own allocations (measured: ~20 MB).

``scripts/measure_fit.py`` compares this with the resident memory measured after loading.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from engine.models.hub.gguf_header import GGUFHeader, ModelFacts, model_facts

N_UBATCH = 512
OVERHEAD = 20_000_000
ACTIVATION_FACTOR = 8  # live f32 activations of width n_embd per token in the worst graph step
FITS, TIGHT, WONT_FIT = "fits", "tight", "won't fit"
SWA_EVERY = {"gemma3": 6, "gemma3n": 5}  # every Nth layer is global; the others are sliding-window

_LAYER = re.compile(r"^blk\.(\d+)\.")
Q4_0, Q4_K, Q2_K, IQ4_NL, MXFP4 = 2, 12, 10, 20, 39  # ggml type ids


def repack_types(exact: bool = False) -> frozenset[int]:
    """The ggml types llama.cpp's CPU backend repacks on this machine (x86: from the CPU flags),
    for decoding that is ``exact`` or not (engine.llama.model.for_decoding)."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return frozenset()
    types = {Q4_0, Q4_K, IQ4_NL, MXFP4} if "avx2" in flags else set()
    if "avx512f" in flags:
        types.add(Q2_K)
    return frozenset(types & {Q4_K} if exact else types)


@dataclass(frozen=True)
class Machine:
    ram_total: int
    ram_available: int
    vram_total: int | None = None  # None: unknown (no GPU, or not detected)
    vram_free: int | None = None  # what the GPU's driver says is free (None: not known)


@dataclass(frozen=True)
class FitRequest:
    n_ctx: int = 4096
    n_gpu_layers: int = 0  # -1: all
    kv_bytes_per_element: float = 2.0  # f16
    exact: bool = True  # exact decoding repacks Q4_K alone (ContextParams.exact)


@dataclass(frozen=True)
class FitEstimate:
    verdict: str  # FITS, TIGHT or WONT_FIT
    weights_cpu: int  # resident on the CPU side: mapped file pages plus repacked copies
    weights_gpu: int
    weights_repacked: int  # of weights_cpu: the copies llama.cpp's CPU backend repacks
    kv_cache: int
    compute: int
    ram_loaded: int  # resident right after loading (the compute buffer not yet touched)
    ram_needed: int  # resident once generating: what must fit
    vram_needed: int
    ram_available: int
    vram_total: int | None
    reason: str  # one line with the figures

    def to_json(self) -> dict:
        return dict(self.__dict__)


def machine(gpu: tuple[int, int] | None = None) -> Machine:
    """This machine's RAM (total and available, from /proc/meminfo where present); ``gpu``: its
    GPU memory, free and total, as the devices report it (engine.llama.devices.gpu_memory)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    available = total
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    free, vram = gpu if gpu is not None else (None, None)
    return Machine(ram_total=total, ram_available=available, vram_total=vram, vram_free=free)


def kv_cache_bytes(f: ModelFacts, n_ctx: int, bytes_per_element: float = 2.0) -> int:
    width = f.n_head_kv * (f.head_dim_k + f.head_dim_v)
    every = SWA_EVERY.get(f.architecture)
    if every and f.sliding_window:
        n_global = f.n_layer // every
        swa_cells = min(n_ctx, f.sliding_window + N_UBATCH)
        cells = n_global * n_ctx + (f.n_layer - n_global) * swa_cells
    else:
        cells = f.n_layer * n_ctx
    return int(cells * width * bytes_per_element)


def compute_bytes(f: ModelFacts, n_ctx: int) -> int:
    n_ub = min(N_UBATCH, n_ctx)
    logits = f.n_vocab * n_ub * 4
    scores = n_ctx * n_ub * max(f.n_head, 1) * 4
    activations = f.n_embd * n_ub * 4 * ACTIVATION_FACTOR
    return max(logits, scores) + activations


def split_weights(h: GGUFHeader, n_layer: int, n_gpu_layers: int,
                  repack: frozenset[int] = frozenset()) -> tuple[int, int, int]:
    """(CPU bytes, GPU bytes, repacked CPU bytes) of the weights with ``n_gpu_layers`` offloaded."""
    gpu_from = 0 if n_gpu_layers < 0 else max(n_layer - n_gpu_layers, 0)
    cpu = gpu = repacked = 0
    for t in h.tensors:
        m = _LAYER.match(t.name)
        on_gpu = (int(m.group(1)) >= gpu_from if m else
                  t.name.startswith("output") and n_gpu_layers != 0 and (n_gpu_layers < 0 or n_gpu_layers > n_layer))
        if n_gpu_layers == 0:
            on_gpu = False
        if on_gpu:
            gpu += t.n_bytes
        else:
            cpu += t.n_bytes
            if (t.ggml_type in repack and t.name != "token_embd.weight" and len(t.shape) == 2
                    and t.shape[1] % 8 == 0):
                repacked += t.n_bytes
    return cpu, gpu, repacked


def estimate(h: GGUFHeader, req: FitRequest, box: Machine | None = None, *,
             file_size: int | None = None, repack: frozenset[int] | None = None) -> FitEstimate:
    """Memory ``h``'s model needs under ``req``, and whether ``box`` (this machine) can hold it.
    ``repack``: the types the CPU backend repacks (default: this machine's for ``req.exact``,
    see repack_types)."""
    box = box or machine()
    f = model_facts(h)
    cpu_w, gpu_w, repacked = split_weights(h, f.n_layer, req.n_gpu_layers,
                                           repack if repack is not None else repack_types(req.exact))
    if not f.tensor_bytes and file_size:  # a tensor type we do not know: count the file instead
        cpu_w, gpu_w, repacked = max(file_size - h.data_offset, 0), 0, 0
    cpu_w += repacked
    n_ctx = req.n_ctx if req.n_ctx > 0 else f.n_ctx_train
    kv = kv_cache_bytes(f, n_ctx, req.kv_bytes_per_element)
    compute = compute_bytes(f, n_ctx)
    offload = req.n_gpu_layers != 0
    ram_loaded = cpu_w + OVERHEAD + (0 if offload else kv)
    ram = ram_loaded + (0 if offload else compute)
    vram = gpu_w + kv + compute if offload else 0
    verdict, reason = _judge(ram, vram, box, offload)
    weights = f"weights {_gb(cpu_w + gpu_w)}" + (f" with {_gb(repacked)} repacked" if repacked else "")
    return FitEstimate(verdict, cpu_w, gpu_w, repacked, kv, compute, ram_loaded, ram, vram, box.ram_available,
                       box.vram_total, f"{verdict}: {reason} ({weights}, KV cache {_gb(kv)} at "
                       f"{n_ctx} tokens, compute {_gb(compute)})")


def _judge(ram: int, vram: int, box: Machine, offload: bool) -> tuple[str, str]:
    verdicts = [_ratio_verdict(ram, box.ram_available)]
    reason = f"needs {_gb(ram)} of RAM, {_gb(box.ram_available)} available"
    if offload:
        if box.vram_total is None:
            reason += f"; needs {_gb(vram)} of GPU memory (not known here)"
        elif box.vram_free is None:
            verdicts.append(_ratio_verdict(vram, box.vram_total))
            reason += f"; needs {_gb(vram)} of GPU memory, {_gb(box.vram_total)} in all"
        else:
            verdicts.append(_ratio_verdict(vram, box.vram_free))
            reason += (f"; needs {_gb(vram)} of GPU memory, {_gb(box.vram_free)} free of "
                       f"{_gb(box.vram_total)}")
    order = [FITS, TIGHT, WONT_FIT]
    return max(verdicts, key=order.index), reason


def _ratio_verdict(need: int, have: int) -> str:
    if need <= 0.8 * have:
        return FITS
    return TIGHT if need <= have else WONT_FIT


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"
