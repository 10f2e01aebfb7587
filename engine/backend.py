"""The one place that imports llama-cpp-python's low-level bindings.

It initialises the backend once and routes llama.cpp's log through Python logging, keeping the
last error lines so that a failed load can say *why* in one line instead of a native abort.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import deque

import llama_cpp as _pkg  # noqa: F401  (importing the package loads the shared library)
from llama_cpp import llama_cpp as lib

log = logging.getLogger(__name__)  # llama.cpp's own log (engine.logsetup.NATIVE)

_GGML_LOG_LEVEL_ERROR = 4
_GGML_LOG_LEVEL_WARN = 3
_recent_errors: deque[str] = deque(maxlen=8)
_init_lock = threading.Lock()
_initialised = False


@lib.llama_log_callback
def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    message = (text or b"").decode("utf-8", "replace").rstrip()
    if not message:
        return
    if level == _GGML_LOG_LEVEL_ERROR:
        _recent_errors.append(message)
        log.warning("%s", message)
    else:
        log.debug("%s", message)


def init() -> None:
    """Initialise llama.cpp's backend once per process (idempotent, thread-safe)."""
    global _initialised
    with _init_lock:
        if _initialised:
            return
        lib.llama_log_set(_on_log, ctypes.c_void_p(0))
        lib.llama_backend_init()
        _initialised = True


def take_errors() -> str:
    """The error lines llama.cpp logged since the last call, joined (empty if none)."""
    lines = list(_recent_errors)
    _recent_errors.clear()
    return " / ".join(lines)
