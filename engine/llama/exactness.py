"""Whether decoding is exact where it runs: the same request gives the same tokens whatever shares
its batch (drafts, caches, other sequences; docs/benchmarks/exact.md).

That holds only where every layer runs on kernels that sum a token's products in one order
whatever the batch. On the CPU: the x86 kernels of patches/ggml-exact.patch (AVX2 or AVX-512),
known by their marker, the row kernels that patch adds to ggml's CPU backend
(``ggml_vec_dot_q4_K_q8_K_rows``), which a build as released (``DUET_EXACT_KERNELS=0``), a
patch that did not apply, a CPU with AVX alone and an ARM build lack (the patch's ARM kernels
were checked under emulation only, so ARM reports inexact). On a Vulkan GPU: the backend's
batch-invariant mode of patches/vulkan/batch-invariant.patch (``ggml_backend_vk_set_batch_invariant``),
which a context turns on when it puts an exact model's layers there and ``exact_gpu`` asks
(``hold_on_gpu``): a setting of its own, off by default, since batches share no work there; its
attention needs an f16 cache. Layers on CUDA or Metal run those backends' kernels as llama.cpp
ships them. So ``exact`` is what was asked *and* what the build and the placement can keep;
``reason`` says why not, in one line.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache

from engine.llama.backend import lib
from engine.llama.devices import gpus

MARKER = "ggml_vec_dot_q4_K_q8_K_rows"
VULKAN_MARKER = "ggml_backend_vk_set_batch_invariant"
REPACK_SWITCH = "ggml_cpu_repack_set_exact"


@cache
def patched_kernels() -> bool:
    """Whether the loaded llama.cpp has Duet's batch-invariant CPU kernels."""
    return getattr(lib._lib, MARKER, None) is not None


def repacks_exactly() -> bool:
    """Whether the loaded llama.cpp can repack weights and keep decoding exact: the patch's switch
    that keeps only the layouts whose GEMM (groups of 4 rows) and GEMV (the rest) sum a row
    alike (Q4_K on x86), in a build with the batch-invariant kernels."""
    return patched_kernels() and getattr(lib._lib, REPACK_SWITCH, None) is not None


def set_repack_exact(on: bool) -> None:
    """The switch (a build that has it), read by llama.cpp as a model loads: on, the weights
    repacked are only those whose layouts keep decoding exact."""
    fn = getattr(lib._lib, REPACK_SWITCH)
    fn.argtypes, fn.restype = [ctypes.c_bool], None
    fn(on)


@cache
def vulkan_invariant() -> bool:
    """Whether the loaded llama.cpp's Vulkan backend has Duet's batch-invariant mode."""
    return getattr(lib._lib, VULKAN_MARKER, None) is not None


def vulkan_exact_possible() -> bool:
    """Whether this build and machine can keep exact decoding on a GPU (``exact_gpu``)."""
    return vulkan_invariant() and any(d.name.startswith("Vulkan") for d in gpus())


def hold_on_gpu() -> None:
    """Turn the Vulkan backend's batch-invariant mode on, for this process from now on (an exact
    model's layers go to the GPU; every context in the process then pays its cost there:
    docs/benchmarks/gpu.md)."""
    if vulkan_invariant():
        set_gpu_mode(True)


def set_gpu_mode(on: bool) -> None:
    """The Vulkan backend's batch-invariant mode, on or off (a build that has it)."""
    fn = getattr(lib._lib, VULKAN_MARKER)
    fn.argtypes, fn.restype = [ctypes.c_bool], None
    fn(on)


@dataclass(frozen=True)
class Exactness:
    exact: bool
    reason: str | None = None  # why not, when not

    @property
    def fingerprint(self) -> str:
        """The build and the promise, as replies name them (OpenAI's ``system_fingerprint``)."""
        return f"duet-{'exact' if self.exact else 'inexact'}-{_build()}"

    def to_json(self) -> dict[str, object]:
        return {"exact": self.exact, "exact_reason": self.reason}


def exactness(asked: bool, n_gpu_layers: int = 0, kv: tuple[str, str] = ("f16", "f16"),
              on_gpu: bool = False, experts: bool = False) -> Exactness:
    """What a model loaded with ``n_gpu_layers`` (-1: all) and a cache of ``kv`` (its keys' and
    values' types) gets when exact decoding is ``asked``, and asked ``on_gpu`` too
    (ContextParams.exact_gpu); ``experts``: a mixture-of-experts model."""
    if not asked:
        return Exactness(False, "exact decoding is off")
    if not patched_kernels():
        return Exactness(False, "this llama.cpp build lacks Duet's batch-invariant kernels "
                                "(built as released, or for a CPU they do not cover)")
    if n_gpu_layers != 0 and has_gpu():
        why = _why_not_on_gpu(kv, on_gpu, experts)
        if why:
            return Exactness(False, why)
    return Exactness(True)


def _why_not_on_gpu(kv: tuple[str, str], asked: bool, experts: bool) -> str | None:
    if not all(d.name.startswith("Vulkan") for d in gpus()):
        return ("layers on the GPU run its kernels as llama.cpp ships them; "
                "0 GPU layers keeps decoding exact")
    if not vulkan_invariant():
        return ("this Vulkan build lacks Duet's batch-invariant mode; "
                "0 GPU layers keeps decoding exact")
    if not asked:
        return ("on a Vulkan GPU exact decoding is a setting of its own (exact_gpu), off: "
                "prompts read slower there; 0 GPU layers keeps decoding exact")
    if kv != ("f16", "f16"):
        return "on a Vulkan GPU exact decoding needs an f16 KV cache"
    if experts:  # (the mode covers plain products, not the experts' batched ones)
        return "on a Vulkan GPU a mixture-of-experts model's products are not exact"
    return None


@cache
def _build() -> str:
    """``patched`` or ``released``, and whether the build can offload to a GPU."""
    kernels = "patched" if patched_kernels() else "released"
    return f"{kernels}-{'gpu' if has_gpu() else 'cpu'}"


def has_gpu() -> bool:
    """Whether llama.cpp found a GPU device (a discrete or integrated one) to offload layers to.
    (``llama_supports_gpu_offload`` also says yes for the RPC backend, built in every flavour;
    layers sent to a ``duet-cli worker`` run that worker's CPU kernels.)"""
    return bool(gpus())
