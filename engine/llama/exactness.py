"""Whether decoding is exact where it runs: the same request gives the same tokens whatever shares
its batch (drafts, caches, other sequences; docs/benchmarks/exact.md).

That holds only where every layer runs on kernels that sum a token's products in one order
whatever the batch: the x86 CPU kernels of patches/ggml-exact.patch. The patched library is
known by its marker, the row kernels that patch adds to ggml's CPU backend
(``ggml_vec_dot_q4_K_q8_K_rows``), which a build as released (``DUET_EXACT_KERNELS=0``), a
patch that did not apply, and an ARM build lack. Layers offloaded to a GPU (CUDA, Metal,
Vulkan) run that backend's kernels as llama.cpp ships them. So ``exact`` is what was asked *and*
what the build and the placement can keep; ``reason`` says why not, in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from engine.llama.backend import lib
from engine.llama.devices import gpus

MARKER = "ggml_vec_dot_q4_K_q8_K_rows"


@cache
def patched_kernels() -> bool:
    """Whether the loaded llama.cpp has Duet's batch-invariant CPU kernels."""
    return getattr(lib._lib, MARKER, None) is not None


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


def exactness(asked: bool, n_gpu_layers: int = 0) -> Exactness:
    """What a model loaded with ``n_gpu_layers`` (-1: all) gets when exact decoding is
    ``asked``."""
    if not asked:
        return Exactness(False, "exact decoding is off")
    if not patched_kernels():
        return Exactness(False, "this llama.cpp build lacks Duet's batch-invariant kernels "
                                "(built as released, or for a CPU they do not cover)")
    if n_gpu_layers != 0 and has_gpu():
        return Exactness(False, "layers on the GPU run its kernels as llama.cpp ships them; "
                                "0 GPU layers keeps decoding exact")
    return Exactness(True)


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
