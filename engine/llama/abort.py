"""How a decode learns that it should stop, without Python at every node.

llama.cpp asks a pass's abort callback after every node of its graph, about a thousand times a
step of the 1.5B. A ctypes callback takes the interpreter's lock each time, and while another
Python thread runs (the local server reading a request, the window preparing the typed prompt,
a reply's text being laid out) each take waits for the interpreter's switch interval, 5 ms. One
step of the 1.5B at 128 cells took 2.2-2.4 s beside a busy Python thread, against 0.12-0.14 s
with the flag (0.13-0.15 s with no check at all); alone, 69-74 ms against 68-72 ms with the flag
(``scripts/abort_cost.py target``, three rounds). Either way a pass of reading ahead's size stops
within 27 ms of its stop being set.

So the engine's stops are ``Cancel``s: a ``threading.Event`` that also sets a C int, which the
patched library's ``ggml_abort_on_flag`` (patches/abort-flag.patch) reads between nodes. A plain
Event, or a build of llama.cpp as released, falls back to the Python callback.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

from engine.llama.backend import lib


class Cancel(threading.Event):
    """An Event whose state llama.cpp can read without Python: ``flag`` is 1 while it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.flag = ctypes.c_int(0)
        self._lock = threading.Lock()  # the Event and the flag change together

    def set(self) -> None:
        with self._lock:
            self.flag.value = 1
            super().set()

    def clear(self) -> None:
        with self._lock:
            super().clear()
            self.flag.value = 0


def _native() -> object | None:
    """ggml_abort_on_flag as a callback (found through libllama's handle: the loader searches its
    dependencies, ggml-base among them); None in llama.cpp as released."""
    fn = getattr(lib._lib, "ggml_abort_on_flag", None)
    return None if fn is None else ctypes.cast(fn, lib.ggml_abort_callback)


NATIVE = _native()  # ggml_abort_on_flag as a callback, or None


def hook(handle: object, cancel: threading.Event, fallback: Callable) -> None:
    """Make llama context ``handle``'s passes stop once ``cancel`` is set: through its C flag
    when it has one and the library can read it, else through ``fallback`` (a ctypes callback
    that reads the Event)."""
    if NATIVE is not None and isinstance(cancel, Cancel):
        lib.llama_set_abort_callback(handle, NATIVE, ctypes.addressof(cancel.flag))
    else:
        lib.llama_set_abort_callback(handle, fallback, None)


def unhook(handle: object) -> None:
    """No stop checks any more (llama.cpp then skips them)."""
    lib.llama_set_abort_callback(handle, NULL, None)


NULL = ctypes.cast(None, lib.ggml_abort_callback)  # type: ignore[arg-type]  # NULL is allowed
