"""The one place that imports llama-cpp-python's low-level bindings.

It initialises the backend once and routes llama.cpp's log through Python logging, keeping the
last error lines so that a failed load can say *why* in one line instead of a native abort.

Loading the library loads GNU OpenMP (libgomp), which reads its settings then. By default a
thread that waits at one of the many barriers of a pass spins 300,000 times before it sleeps.
When other programs keep the cores busy, the thread it waits for is not running, so each
barrier burns a time slice: 1 to 100 times slower replies (docs/benchmarks/busy.md). With
SPIN_COUNT, the count libgomp itself takes when threads outnumber the cores, a busy machine
gives Duet its share and a quiet one about the same speed (0.97x on the 1.5B starter; the
135M, whose steps are smallest, 0.86x). The setting is for this process alone
(other programs it starts keep their own), and a GOMP_SPINCOUNT of the user's is left alone.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import threading
from collections import deque
from pathlib import Path
from typing import Any

SPIN_COUNT = "1000"
_spin_set = "GOMP_SPINCOUNT" not in os.environ
if _spin_set:
    os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT
try:
    import llama_cpp as _pkg  # noqa: F401, E402  (importing the package loads the libraries)
    from llama_cpp import llama_cpp as lib  # noqa: E402
finally:
    if _spin_set:
        del os.environ["GOMP_SPINCOUNT"]

log = logging.getLogger(__name__)  # llama.cpp's own log (engine.logsetup.NATIVE)

_GGML_LOG_LEVEL_ERROR = 4
_GGML_LOG_LEVEL_WARN = 3
_recent_errors: deque[str] = deque(maxlen=8)
_init_lock = threading.Lock()
_initialised = False


_stops: dict[int, threading.Event] = {}  # each context's decode under way: its stop
_stops_lock = threading.Lock()


def watch_stop(owner: int, stop: threading.Event | None) -> None:
    """While ``owner``'s decode runs with ``stop`` (None: it ended), the error lines llama.cpp
    writes about a computation aborted because a stop was set (Stop, a newcomer) are expected:
    they are logged at debug level, not as warnings on the console, and no later failure
    reports them."""
    with _stops_lock:
        if stop is not None:
            _stops[owner] = stop
        else:
            _stops.pop(owner, None)


def _stopping() -> bool:
    with _stops_lock:
        return any(stop.is_set() for stop in _stops.values())


@lib.llama_log_callback
def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    message = (text or b"").decode("utf-8", "replace").rstrip()
    if not message:
        return
    if level == _GGML_LOG_LEVEL_ERROR and _stopping():
        log.debug("%s (the computation was stopped on request)", message)
    elif level == _GGML_LOG_LEVEL_ERROR:
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
        from engine.llama import devices  # (it reads the library this module loads)
        devices.settle()
        _initialised = True


@functools.cache
def mtmd() -> Any:
    """llama-cpp-python's bindings of libmtmd (images), loaded on first use, its log routed as
    llama.cpp's is."""
    from llama_cpp import mtmd_cpp

    init()
    mtmd_cpp.mtmd_log_set(_on_log, ctypes.c_void_p(0))
    mtmd_cpp.mtmd_helper_log_set(_on_log, ctypes.c_void_p(0))
    return mtmd_cpp


def take_errors() -> str:
    """The error lines llama.cpp logged since the last call, joined (empty if none)."""
    lines = list(_recent_errors)
    _recent_errors.clear()
    return " / ".join(lines)


@functools.cache
def build_id() -> str:
    """Which llama.cpp build this is: a hash of its libraries' bytes (the version alone does not
    say which kernels were patched in, or with which CPU features they were built). What is
    measured on one build, as a verify-cost curve, is not the other's. The folder is the one the
    bindings loaded libllama from: the package's, or ``LLAMA_CPP_LIB_PATH`` (another build timed
    against this one, as scripts/step_time.py's ``--lib`` does)."""
    h = hashlib.sha256(str(getattr(_pkg, "__version__", "?")).encode())
    lib_dir = Path(getattr(lib, "_base_path", Path(_pkg.__file__).parent / "lib"))
    try:
        libs = sorted(p for p in lib_dir.iterdir() if p.is_file() and not p.is_symlink())
        for p in libs:
            h.update(p.name.encode())
            h.update(p.read_bytes())
    except OSError as e:  # (no lib folder: a build that put them elsewhere) the version alone
        log.debug("llama.cpp's libraries not read for the build id: %s", e)
    return h.hexdigest()[:16]
