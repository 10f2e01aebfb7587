"""What runs when a worker dies during a pass and ggml aborts the process: save, then relaunch.

ggml-rpc has no error path: a worker lost in the middle of a pass ends in ggml's abort callback
(engine.llama.rpc), and the process cannot go on. Before it ends, the callback runs the rescue hooks
registered here, so that nothing is lost:

- a hook gets the one-line message and writes what only this process holds (the conversation
  with the reply streamed so far) through the ordinary stores. Hooks must not call llama.cpp
  (the client is in the middle of a failed call). Each runs in its own thread, guarded, and all
  of them together get at most :data:`RESCUE_S` seconds; one that hangs is left behind;
- then, when a relaunch is set (the app), the process replaces itself with a fresh copy of its
  command (``os.execv``) that reopens what the hooks saved; every inherited descriptor is closed
  on exec first, so that the surviving workers see this process's connections end and can serve
  the new one. A process that relaunched less than :data:`MIN_RELAUNCH_GAP_S` ago (a worker that
  keeps failing) exits instead, as does one whose relaunch cannot start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

log = logging.getLogger(__name__)

RESCUE_S = 3.0  # all hooks together; the loss must be reported within seconds
MIN_RELAUNCH_GAP_S = 30.0
RELAUNCHED_AT = "DUET_RELAUNCHED_AT"  # environment: when this process was relaunched (epoch s)

Hook = Callable[[str], None]
Relaunch = Callable[[str], "Sequence[str] | None"]

_lock = threading.Lock()
_hooks: list[Hook] = []
_relaunch: Relaunch | None = None


def add(hook: Hook) -> None:
    with _lock:
        _hooks.append(hook)


def remove(hook: Hook) -> None:
    with _lock:
        if hook in _hooks:
            _hooks.remove(hook)


@contextlib.contextmanager
def hook(fn: Hook) -> Iterator[None]:
    """Run ``fn(message)`` if the process ends of a lost worker while the block runs."""
    add(fn)
    try:
        yield
    finally:
        remove(fn)


def set_relaunch(fn: Relaunch | None) -> None:
    """After the hooks, exec the command ``fn(message)`` returns (None or empty: just exit)."""
    global _relaunch
    _relaunch = fn


def run_hooks(message: str, budget_s: float = RESCUE_S) -> int:
    """Run every hook, each in its own daemon thread, within ``budget_s`` in all. Returns how
    many finished without an error (a hook's exception is logged, never raised)."""
    with _lock:
        hooks = list(_hooks)
    done: list[Hook] = []

    def run(fn: Hook) -> None:
        try:
            fn(message)
            done.append(fn)
        except BaseException:  # noqa: BLE001 - the process is ending; report and go on
            log.exception("a rescue hook failed")

    deadline = time.monotonic() + budget_s
    threads = [threading.Thread(target=run, args=(fn,), name="duet-rescue", daemon=True)
               for fn in hooks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            log.warning("a rescue hook did not finish within %.1f s", budget_s)
    return len(done)


def relaunch_argv(message: str) -> list[str] | None:
    """The command to exec after a rescue, or None (exit): no relaunch set, it gave nothing,
    or this process was itself relaunched too recently."""
    if _relaunch is None:
        return None
    try:
        last = float(os.environ.get(RELAUNCHED_AT, "0"))
    except ValueError:
        last = 0.0
    if time.time() - last < MIN_RELAUNCH_GAP_S:
        log.warning("not relaunching: the last relaunch was %.0f s ago", time.time() - last)
        return None
    try:
        argv = list(_relaunch(message) or ())
    except Exception:  # noqa: BLE001 - the process is ending
        log.exception("cannot build the relaunch command")
        return None
    return argv or None


def exec_or_exit(argv: Sequence[str] | None, code: int) -> None:
    """Replace the process with ``argv`` (descriptors closed on exec), or exit with ``code``."""
    if argv:
        _close_on_exec()
        os.environ[RELAUNCHED_AT] = f"{time.time():.0f}"
        try:
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        try:
            os.execv(argv[0], list(argv))
        except OSError as e:
            os.write(2, f"duet: error: cannot restart ({e.strerror or e})\n".encode())
    os._exit(code)


def _close_on_exec() -> None:
    fd_dir = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    try:
        fds = [int(n) for n in os.listdir(fd_dir) if n.isdigit()]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2:
            with contextlib.suppress(OSError):
                os.set_inheritable(fd, False)
