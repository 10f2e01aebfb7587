"""The app's *Local server*: engine.server on the app's chosen models, started and stopped from
the settings (server_enabled, server_host, server_port, server_api_key).

It runs its own Runtime on its own engine thread, so the GUI's conversation is never paused by
a client (and a client never waits for the GUI). The two runtimes load the same GGUF files,
which llama.cpp maps into memory: the weights' pages are shared by the operating system, the
KV caches are not. Loading and stopping happen off the GUI thread; ``started(address)``,
``stopped()`` and ``failed(message)`` report back (queued to the GUI thread).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Mapping

from PySide6.QtCore import QObject, Signal

from engine.errors import DuetError

from app import settings as S

log = logging.getLogger(__name__)


class LocalServer(QObject):
    started = Signal(str)  # the base URL clients use, e.g. http://127.0.0.1:8080/v1
    stopped = Signal()
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()  # one start/stop at a time
        self._queue_lock = threading.Lock()
        self._wanted: dict[str, Any] | None = None  # the latest snapshot not yet applied
        self._applier: threading.Thread | None = None
        self._running: tuple[Any, Any] | None = None  # (BackgroundServer, Engine)
        self.address: str | None = None

    def apply(self, values: Mapping[str, Any]) -> None:
        """Start, restart or stop to match ``values`` (a settings snapshot); returns at once.
        Snapshots are applied in order by one thread; of several waiting, only the latest."""
        with self._queue_lock:
            self._wanted = dict(values)
            if self._applier is None:
                self._applier = threading.Thread(target=self._apply_all, name="duet-local-server",
                                                 daemon=True)
                self._applier.start()

    def stop(self) -> None:
        """Stop now (blocking; call at exit)."""
        with self._lock:
            self._stop()

    # -- off the GUI thread ---------------------------------------------------------------
    def _apply_all(self) -> None:
        while True:
            with self._queue_lock:
                values, self._wanted = self._wanted, None
                if values is None:
                    self._applier = None
                    return
            self._apply(values)

    def _apply(self, values: dict[str, Any]) -> None:
        with self._lock:
            self._stop()
            if not values["server_enabled"]:
                return
            try:
                self._start(values)
            except (DuetError, OSError, ValueError) as e:
                self.failed.emit(f"The local server did not start: {getattr(e, 'strerror', None) or e}")
            except Exception as e:  # never let the thread die silently
                log.exception("the local server failed to start")
                self.failed.emit(f"The local server did not start: {type(e).__name__}: {e}")

    def _start(self, values: dict[str, Any]) -> None:
        from engine.runtime import Runtime
        from engine.server.app import ServerConfig
        from engine.server.run import BackgroundServer, build, host_problem, model_names

        host, key = values["server_host"], values["server_api_key"] or None
        problem = host_problem(host, key)
        if problem:
            raise DuetError(problem)
        if not values["target_model"]:
            raise DuetError("choose a model first")
        config = S.runtime_config(values, Path(values["target_model"]), values["draft_model"] or None)
        runtime = Runtime(config)
        model_id, aliases = model_names(runtime)
        engine, app = build(runtime, ServerConfig(model_id, aliases, api_key=key))
        try:
            server = BackgroundServer(app, host, values["server_port"])
        except BaseException:
            engine.close()
            raise
        self._running = (server, engine)
        self.address = f"{server.url}/v1"
        log.info("local server on %s", self.address)
        self.started.emit(self.address)

    def _stop(self) -> None:
        if self._running is None:
            return
        server, engine = self._running
        self._running, self.address = None, None
        server.close()
        engine.close()
        self.stopped.emit()
