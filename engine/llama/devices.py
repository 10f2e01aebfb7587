"""The devices llama.cpp found (CPU, GPUs, RPC servers), and what Duet settles for a device before
any model uses it.

Vulkan on a software device (Mesa's lavapipe, named ``llvmpipe``; Debian 12 ships Mesa 22.3)
crashes inside the driver with the Vulkan backend's fused operations on: after a pass over 512
cells, a rewind and a pass of two rows read back whole, the driver's worker thread dies of a
segmentation fault (issue 75; tests/gpu/test_vulkan.py walks that path). With
``GGML_VK_DISABLE_FUSION`` set the same passes run. A software device gains nothing from fusion
(it saves GPU launches and memory trips; lavapipe runs the shaders on the CPU), so Duet turns it
off there, and only there: a variable the person set is left as it is. The backend reads it
when it first sets a device up, at the first model load, after the devices are listed.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from engine.llama.backend import lib

log = logging.getLogger(__name__)

SOFTWARE_GPUS = ("llvmpipe", "lavapipe", "swiftshader")  # Vulkan on the CPU, by description
NO_FUSION = "GGML_VK_DISABLE_FUSION"
_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}  # enum ggml_backend_dev_type


@dataclass(frozen=True)
class Device:
    name: str  # "CPU", "Vulkan0", "RPC[127.0.0.1:50052]"
    description: str  # "llvmpipe (LLVM 15.0.6, 256 bits)"
    kind: str  # cpu, gpu, igpu or accel
    handle: int = field(default=0, compare=False, repr=False)  # ggml_backend_dev_t (the process's)

    @property
    def software(self) -> bool:
        """A GPU API that runs on the CPU (lavapipe, SwiftShader)."""
        return any(s in self.description.lower() for s in SOFTWARE_GPUS)


def _fn(name: str, restype: object, *argtypes: object) -> Any:
    fn = getattr(lib._lib, name, None)
    if fn is not None:
        fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


@cache
def devices() -> tuple[Device, ...]:
    """Every device llama.cpp's backends found, in its order."""
    count = _fn("ggml_backend_dev_count", ctypes.c_size_t)
    get = _fn("ggml_backend_dev_get", ctypes.c_void_p, ctypes.c_size_t)
    name = _fn("ggml_backend_dev_name", ctypes.c_char_p, ctypes.c_void_p)
    desc = _fn("ggml_backend_dev_description", ctypes.c_char_p, ctypes.c_void_p)
    kind = _fn("ggml_backend_dev_type", ctypes.c_int, ctypes.c_void_p)
    if None in (count, get, name, desc, kind):
        return ()
    lib.llama_supports_gpu_offload()  # loads the backends first, where they are loaded lazily
    found = []
    for i in range(count()):
        dev = get(i)
        found.append(Device((name(dev) or b"").decode(errors="replace"),
                            (desc(dev) or b"").decode(errors="replace"),
                            _TYPES.get(kind(dev), "?"), dev))
    return tuple(found)


def gpus() -> tuple[Device, ...]:
    """The devices layers can be offloaded to (RPC servers run their own CPU kernels)."""
    return tuple(d for d in devices() if d.kind in ("gpu", "igpu"))


def gpu_memory() -> tuple[int, int] | None:
    """The free and total memory of the devices layers are offloaded to, in all, as their
    drivers report it now (None: no such device). A software device (lavapipe) reports the
    host's memory, which is what it uses."""
    memory = _fn("ggml_backend_dev_memory", None, ctypes.c_void_p,
                 ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
    found = gpus()
    if memory is None or not found:
        return None
    free_all = total_all = 0
    for d in found:
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        memory(d.handle, ctypes.byref(free), ctypes.byref(total))
        free_all, total_all = free_all + free.value, total_all + total.value
    return free_all, total_all


def settle() -> None:
    """Set what a device needs before its first use (called once, at backend init)."""
    soft = [d for d in gpus() if d.software and d.name.startswith("Vulkan")]
    if soft and NO_FUSION not in os.environ:
        os.environ[NO_FUSION] = "1"
        log.info("%s is Vulkan on the CPU: its fused operations are off (%s)",
                 soft[0].description, NO_FUSION)
