"""The RPC workers of the loaded models in the models panel: memory and health, kept fresh.

The memory is what each worker reported when the model was loaded (engine.llama.rpc.WorkerInfo).
Health comes from the loaded runtime's connection watch (a non-blocking peek at this process's
own connections, engine.llama.rpc.ConnectionWatch): no traffic, no llama.cpp call. It is read on a
small daemon thread every :data:`INTERVAL_S` seconds, never on the GUI thread, and the text
reaches the label through a queued signal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, Signal

from engine.llama.rpc import WorkerInfo

log = logging.getLogger(__name__)

INTERVAL_S = 2.0


def describe_workers(workers: Sequence[WorkerInfo], lost: str | None) -> str:
    """One line per worker: endpoint, devices, memory, health."""
    lines = []
    for w in workers:
        health = "lost (restart it and load the model again)" if w.endpoint == lost else "connected"
        memory = (f"{w.free_bytes / 2**30:.1f} of {w.total_bytes / 2**30:.1f} GiB free at load"
                  if w.total_bytes else "memory unknown")
        devices = ", ".join(w.devices) or "?"
        lines.append(f"RPC worker {w.endpoint} ({devices}): {memory} · {health}")
    return "\n".join(lines)


class WorkerMonitor(QObject):
    """``changed(text)`` with the workers' lines whenever their health changes."""

    changed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._stop: threading.Event | None = None

    def watch(self, workers: Sequence[WorkerInfo], lost: Callable[[], str | None] | None) -> None:
        """Follow ``workers`` (none: stop); ``lost()`` names a worker that went away, or None."""
        self.stop()
        if not workers:
            self.changed.emit("")
            return
        self.changed.emit(describe_workers(workers, None))
        if lost is None:
            return
        stop = self._stop = threading.Event()
        threading.Thread(target=self._run, args=(tuple(workers), lost, stop),
                         name="duet-workers", daemon=True).start()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._stop = None

    def _run(self, workers: tuple[WorkerInfo, ...], lost: Callable[[], str | None],
             stop: threading.Event) -> None:
        last: str | None = None
        while not stop.wait(INTERVAL_S):
            try:
                now = lost()
            except Exception:  # noqa: BLE001 - a closed runtime: nothing more to watch
                log.debug("worker health unavailable", exc_info=True)
                return
            if now != last and not stop.is_set():
                last = now
                try:
                    self.changed.emit(describe_workers(workers, now))
                except RuntimeError:  # the panel is gone (the window closed)
                    return
            if now is not None:
                return  # a lost worker stays lost until the next load
