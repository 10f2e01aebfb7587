"""The app's *Local server*: engine.server over the app's own engine, started and stopped from
the settings (server_enabled, server_host, server_port, server_api_key).

The server's clients and the app's chat share one engine service (engine.runtime.service.Engine): one
model in memory, one KV cache, replies decoded together (the app's conversation on sequence 0,
the clients on the others when there are several; ``n_parallel``). When the models are loaded
again the server follows the new engine without a restart (engine.server.app.serve_engines:
its clients' connections and replies in flight go on); the other models the window keeps loaded
(engine.runtime.pool) are served too, each by its file's name. A change of its address or key
restarts it. Starting and stopping happen off the GUI thread;
``started(address)``, ``stopped()`` and ``failed(message)`` report back (queued to the GUI
thread).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import QObject, Signal

from engine.errors import DuetError

log = logging.getLogger(__name__)


class LocalServer(QObject):
    started = Signal(str)  # the base URL clients use, e.g. http://127.0.0.1:8080/v1
    stopped = Signal()
    failed = Signal(str)

    def __init__(self, client: Any = None, parent: QObject | None = None) -> None:
        """``client``: the app's EngineClient, whose engine ``apply`` serves unless given one."""
        super().__init__(parent)
        self.client = client
        self._lock = threading.Lock()  # one start/stop at a time
        self._queue_lock = threading.Lock()
        self._wanted: dict[str, Any] | None = None  # the latest snapshot not yet applied
        self._applier: threading.Thread | None = None
        self._running: Any = None  # the BackgroundServer
        self._app: Any = None  # its Starlette app
        self._listening: tuple[str, int, str | None] | None = None  # its host, port and key
        self._served: frozenset[int] = frozenset()  # id() of the engines it serves
        self.address: str | None = None

    def serves(self, engines: list[Any]) -> bool:
        """Whether it runs and serves exactly ``engines`` (a switch between kept models needs
        no restart: its clients' replies in flight go on)."""
        return self._running is not None and self._served == frozenset(map(id, engines))

    def apply(self, values: Mapping[str, Any], engine: Any = None) -> None:
        """Start, restart or stop to match ``values`` (a settings snapshot), serving ``engine``
        (an engine.runtime.service.Engine; by default the client's model in use, and the other
        models it keeps loaded, each by its name; None when no model is loaded); returns at
        once. Snapshots are applied in order by one thread; of several waiting, only the latest."""
        others: list[Any] = []
        if engine is None and self.client is not None:
            engine, *others = self.client.worker.engines() or [None]
        with self._queue_lock:
            self._wanted = dict(values)
            self._wanted["engine"] = engine
            self._wanted["others"] = others
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
            same = self._running is not None and values["server_enabled"] and \
                self._listening == _listening(values)
            if not same:
                self._stop()
                if not values["server_enabled"]:
                    return
            try:
                self._serve(values) if same else self._start(values)
            except (DuetError, OSError, ValueError) as e:
                self._stop()  # (a running server whose models went does not go on without them)
                self.failed.emit(f"The local server did not start: {getattr(e, 'strerror', None) or e}")
            except Exception as e:  # never let the thread die silently
                self._stop()
                log.exception("the local server failed to start")
                self.failed.emit(f"The local server did not start: {type(e).__name__}: {e}")

    def _start(self, values: dict[str, Any]) -> None:
        # lazy: the HTTP server's routes and uvicorn (~60 ms) only when the local server is turned on
        from engine.server.app import create_app
        from engine.server.run import BackgroundServer, host_problem

        host, key = values["server_host"], values["server_api_key"] or None
        problem = host_problem(host, key)
        if problem:
            raise DuetError(problem)
        engine, others, config = _served(values)
        app = create_app(engine, config, others)
        server = BackgroundServer(app, host, values["server_port"])
        self._running, self._app, self._listening = server, app, _listening(values)
        self._served = frozenset(map(id, [engine, *others]))
        self.address = f"{server.url}/v1"
        log.info("local server on %s", self.address)
        self.started.emit(self.address)

    def _serve(self, values: dict[str, Any]) -> None:
        """The running server serves the models of ``values`` from its next request on."""
        from engine.server.app import serve_engines

        engine, others, config = _served(values)
        serve_engines(self._app, engine, config, others)
        self._served = frozenset(map(id, [engine, *others]))
        log.info("local server on %s: now %d models", self.address, 1 + len(others))

    def _stop(self) -> None:
        if self._running is None:
            return
        server, self._running, self.address = self._running, None, None
        self._app = self._listening = None
        server.close()  # the engine is the app's: it goes on
        self.stopped.emit()


def _listening(values: Mapping[str, Any]) -> tuple[str, int, str | None]:
    return values["server_host"], values["server_port"], values["server_api_key"] or None


def _served(values: Mapping[str, Any]) -> tuple[Any, list[Any], Any]:
    """(the default model's engine, the others, the API's config) of ``values``."""
    from engine.server.app import ApiConfig, model_names

    engine = values["engine"]
    if engine is None or engine.runtime.closed:
        raise DuetError("load a model first")
    model_id, aliases = model_names(engine.runtime)
    others = [e for e in values["others"] if not e.runtime.closed]
    return engine, others, ApiConfig(model_id, aliases, api_key=values["server_api_key"] or None)
