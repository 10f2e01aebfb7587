"""Starting the server: in the foreground (``duet-cli serve``) or in a background thread
(tests, benchmarks, the app), always on a socket bound before uvicorn starts so that the port is
known and connections made at once simply wait in the backlog."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from starlette.applications import Starlette

from engine import paths
from engine.errors import DuetError
from engine.models import served
from engine.models.hub.fit import FitRequest
from engine.models.served import ModelOffer
from engine.net import is_loopback
from engine.runtime.cores import Cores
from engine.runtime.runtime import Runtime, RuntimeConfig
from engine.runtime.service import Engine
from engine.server.app import ApiConfig, create_app
from engine.server.core import ServedModel

if TYPE_CHECKING:
    from engine.decode.speculative.later import LaterCurves

log = logging.getLogger(__name__)


def host_problem(host: str, api_key: str | None) -> str | None:
    """Why listening on ``host`` without a key is unsafe (None when it is fine)."""
    if is_loopback(host) or api_key:
        return None
    return f"listening on {host} lets other machines use the model: it needs an API key"


def offered(config: RuntimeConfig, folders: list[Path], given: str | None = None) -> list[ModelOffer]:
    """What ``duet-cli serve`` offers by name: ``config.target`` first (the default model,
    which also answers to ``given``, the name it was asked by), then every chat model in the
    models folder and ``folders`` (engine.models.served), each with its draft when the drafter
    may use one."""
    found = served.gather(config.target.path, [paths.models_dir(), *folders])
    fit = FitRequest(n_ctx=config.context.n_ctx, n_gpu_layers=config.target.n_gpu_layers,
                     exact=config.context.exact)
    drafts = config.speculative.drafter in ("auto", "model")
    return served.offers(found, fit=fit, draft_for_first=config.draft.path if config.draft else None,
                         drafts=drafts, first_aliases=(given,) if given else ())


def open_model(config: RuntimeConfig, api: ApiConfig, max_queue: int, offer: ModelOffer,
               cores: Cores) -> ServedModel:
    """Load ``offer`` with ``config``'s settings (its own file and draft): its engine thread
    (sharing the pool's ``cores``) and its server, for the pool. A verify-cost curve not measured yet on this machine is
    measured between requests, as the window does (the first ones decode plainly): the load
    is the model's alone."""
    draft = None
    if offer.draft is not None:
        like = config.draft or config.target
        draft = replace(like, path=offer.draft, rpc=() if config.draft is None else like.rpc)
    speculative = config.speculative
    if draft is None and speculative.drafter == "model":
        speculative = replace(speculative, drafter="auto")  # no draft for this one: n-gram
    mine = replace(config, target=replace(config.target, path=offer.path), draft=draft,
                   speculative=speculative)
    runtime = Runtime(mine, measure=False)
    runtime.keep_on_close = True  # an unload or the server's end keeps its clients' chats on disk
    engine = Engine(runtime, max_queue=max_queue, cores=cores)
    engine.add_idle(partial(_opening, runtime, engine.preempt))
    if runtime.later is not None:
        engine.add_idle(_measuring(runtime.later, engine.preempt))
    return ServedModel(engine, offer.name, api)


def _opening(runtime: Runtime, preempt: threading.Event) -> bool:
    """A model loaded ahead of its requests reads its template's opening meanwhile (one idle
    step; not part of the load: read apart, it cost a load on demand more than it saved); a
    request that arrives stops it and reads the opening itself."""
    runtime.read_opening(preempt)
    return False


def _measuring(later: LaterCurves, preempt: threading.Event) -> Callable[[], bool]:
    """The measurement's steps as the engine's idle work: a request that arrives stops the
    decode under way (``preempt``), so the model's first requests never wait for it."""
    def step() -> bool:
        try:
            return later.step(preempt)
        except DuetError as e:
            log.warning("measuring the verify cost failed (no drafting): %s", e)
            later.close()
            return False

    return step


def build(runtime: Runtime, config: ApiConfig, *, max_queue: int = 8,
          gate: threading.Event | None = None) -> tuple[Engine, Starlette]:
    """The engine thread (which owns ``runtime`` from now on) and the app over it."""
    runtime.keep_on_close = True  # the server's end keeps its clients' chats on disk
    engine = Engine(runtime, max_queue=max_queue, gate=gate)
    return engine, create_app(engine, config)


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def uvicorn_server(app: Any) -> uvicorn.Server:
    return uvicorn.Server(uvicorn.Config(app, lifespan="off", access_log=False, log_config=None,
                                         timeout_graceful_shutdown=5))


class BackgroundServer:
    """uvicorn in a daemon thread on ``host``:``port`` (0: a free port). ``close`` stops it."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0) -> None:
        self._sock = listen(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        self._server = uvicorn_server(app)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="duet-server", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self, timeout: float = 30) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> BackgroundServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
