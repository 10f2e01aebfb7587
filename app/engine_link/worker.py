"""The engine worker: one QObject on one QThread that dispatches the window's requests to the
models it holds (app.engine_link.model_host: the pool of loaded models, each an engine service,
engine.runtime.service.Engine, which owns its contexts on its own thread).

The GUI reaches the worker only through queued signals carrying the frozen requests of
``app.engine_link.messages``, and hears back through the signals below. A chat is queued on the
engine, pinned to sequence 0 (the app's conversation; the local server's clients get the others,
and share the same model in memory); its events are relayed from the engine's thread
(app.engine_link.relay), tokens coalesced (at most one ``tokens`` batch per ~33 ms, and a final
flush before ``finished``). Saving and opening run on the engine's thread between two of its
steps. Every slot catches what it raises: a DuetError becomes ``failed`` with its one-line
message, anything else is logged with its traceback and reported in one line; no thread dies of
an exception.
"""
from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.engine_link.messages import (
    ChatReply,
    ChatRequest,
    Fetched,
    FetchRequest,
    LoadRequest,
    Opened,
    OpenRequest,
    Progress,
    ReadAheadRequest,
    Saved,
    SaveRequest,
    Sized,
    SizeRequest,
    TypingRequest,
)
from app.engine_link.model_host import Held, ModelHost
from app.engine_link.relay import Outlet, Relay
from app.engine_link.throttle import DEFAULT_INTERVAL_S
from app.engine_link.worker_parts import guard, log_read_ahead, open_live, reply_turn
from engine import paths
from engine.chat.reasoning import Thinking
from engine.conversation.session.store import open_conversation, save_conversation
from engine.documents.embeddings import EmbeddingSource
from engine.errors import DecodeError, DuetError
from engine.events import Done, Stats
from engine.models import catalog, fetch
from engine.prompts.request import Chat
from engine.prompts.size import context_use
from engine.runtime.ahead import ReadAhead
from engine.runtime.pool import Pool
from engine.runtime.runtime import Runtime
from engine.runtime.service import Engine, Job, QueueFull
from engine.tools.prompting import result_prefix

log = logging.getLogger(__name__)

FETCH_PROGRESS_INTERVAL_S = 0.1
TYPING_RETRY_MS = 100  # how often a typed prompt that waits for the engine's requests looks again


class EngineWorker(QObject):
    loaded = Signal(object)  # LoadedModel
    progress = Signal(object)  # Progress
    tokens = Signal(object)  # TokenBatch
    finished = Signal(object)  # ChatReply
    saved = Signal(object)  # Saved
    opened = Signal(object)  # Opened
    fetched = Signal(object)  # Fetched
    failed = Signal(object)  # Failure
    typed_ahead = Signal(object)  # (held, total): the typed prompt's tokens read ahead, or None
    sized = Signal(object)  # Sized

    def __init__(self, token_interval: float = DEFAULT_INTERVAL_S) -> None:
        super().__init__()
        # the window's models: the one in use and those kept (app.engine_link.model_host)
        self.host = ModelHost(self.progress.emit, lambda held, total: self.typed_ahead.emit((held, total)),
                              self._stop_typing)
        # the last TypingRequest sent (set on the GUI's thread): one queued behind a newer one,
        # or behind a message sent, is skipped (preparing it may retrieve passages: seconds)
        self.typing_latest: TypingRequest | None = None
        self.typing_deferred: TypingRequest | None = None  # waits for the engine's requests' end
        self.token_interval = token_interval
        self.rescued: tuple[Path, str] | None = None  # (file, why) saved as the process ended

    @property
    def pool(self) -> Pool[Held]:
        return self.host.pool

    @property
    def held(self) -> Held | None:
        return self.host.held

    @property
    def engine(self) -> Engine | None:
        return self.host.engine

    @property
    def ahead(self) -> ReadAhead | None:
        """Reads the prompt being typed (engine.runtime.ahead)."""
        return self.host.held.ahead if self.host.held is not None else None

    @property
    def vectors(self) -> EmbeddingSource | None:
        """Ranks retrieved passages (with an embedding model)."""
        return self.host.held.vectors if self.host.held is not None else None

    @property
    def runtime(self) -> Runtime | None:
        return self.engine.runtime if self.engine is not None else None

    def worker_lost(self) -> str | None:
        """An RPC worker of the loaded models that went away (None: none, or nothing loaded).
        Asked from a watcher thread: it reads the runtime it finds, never keeps it."""
        runtime = self.runtime
        return runtime.worker_lost() if runtime is not None else None

    # -- slots (run on the worker thread) --------------------------------------------------
    @Slot(object)
    def load(self, req: LoadRequest) -> None:
        """Load the models, or switch to them when kept (app.engine_link.model_host); chat works
        as soon as ``loaded`` is heard."""
        with self._guard("load"):
            info = self.host.load(req)
            self.loaded.emit(info)
            if info.measuring:  # after ``loaded``: the window hears of the load first
                self.host.measure()

    def engines(self) -> list[Engine]:
        """The kept models' engines, the one in use first (the local server serves them all)."""
        return self.host.engines()

    @Slot(object)
    def chat(self, req: ChatRequest) -> None:
        """Queue the reply on the engine (sequence 0); its events come back through a relay
        that runs on the engine's thread."""
        with self._guard("chat", req.conversation_id):
            engine = self._engine()
            self._stop_typing()  # the reply's prompt takes what was read, and no more is read
            n_ctx = engine.runtime.ctx.n_ctx
            chat = Chat(req.messages, req.sampling, req.tools, continue_text=req.continue_text,
                        read_calls=req.read_calls, thinking=Thinking(on=req.thinking),
                        embed=self.vectors.embed if self.vectors is not None else None)
            try:
                turn = reply_turn(engine.runtime.target, chat, n_ctx, req.cancel)
            except DecodeError:
                if not req.cancel.is_set():
                    raise
                self.finished.emit(ChatReply(req.conversation_id, Done("cancelled", "", (), Stats()),
                                         0, n_ctx))
                return
            relay = Relay(Outlet(self.tokens.emit, self.progress.emit, self.finished.emit,
                                 self.failed.emit, self._rescued, engine.runtime,
                                 self.token_interval), req, turn)
            grammar = turn.grammar.matcher() if turn.grammar is not None else None
            try:
                engine.submit(Job(turn.prompt, turn.sampling, relay.emit, cancel=req.cancel, slot=0,
                                  grammar=grammar, speculate=req.speculate))
            except QueueFull:
                relay.end()
                raise DuetError("the engine is busy with the local server's clients; "
                                "send again in a moment") from None

    @Slot(object)
    def read_ahead(self, req: ReadAheadRequest) -> None:
        """While a tool call waits or runs: read what the next reply's prompt holds before its
        result into sequence 0 (the reply then reads only the result). Best effort: nothing
        is reported, a failure only means the reply reads more."""
        engine = self.engine
        if engine is None:
            return
        self._stop_typing()
        try:
            prefix = result_prefix(engine.runtime.target, req.messages, req.tools, req.call)
        except (DuetError, UnicodeError) as e:
            log.info("reading ahead of a tool result: %s", e)
            return
        engine.read_ahead(prefix).add_done_callback(log_read_ahead)

    @Slot(object)
    def read_typing(self, req: TypingRequest) -> None:
        """While the person types: read the prompt their message would make so far, whenever
        the engine is idle (engine.runtime.ahead). Best effort: a prompt that cannot be made
        (too long, a file that fails) is simply not read ahead; the send says why."""
        engine, ahead = self.engine, self.ahead
        if engine is None or ahead is None:
            return
        if req is not self.typing_latest:
            return  # a newer prompt, or the message itself, is queued behind it
        if req.messages is not None and (engine.busy or engine.queued):
            # the engine serves a request (the local server's): nothing is read before its end,
            # and preparing the prompt now (tens of ms of template and tokens) would take a core
            # from it: later. (It once slowed the request by a quarter, when llama.cpp's stop
            # check called into Python at every node: engine.llama.abort.)
            self.typing_deferred = req
            QTimer.singleShot(TYPING_RETRY_MS, lambda: self.read_typing(req))
            return
        self.typing_deferred = None
        if req.messages is None:
            self._stop_typing()
            return
        chat = Chat(req.messages, req.sampling, req.tools, thinking=Thinking(on=req.thinking),
                    embed=self.vectors.embed if self.vectors is not None else None)
        try:
            turn = reply_turn(engine.runtime.target, chat, engine.runtime.ctx.n_ctx)
        except (DuetError, UnicodeError) as e:
            log.info("reading ahead of the message typed: %s", e)
            return
        except Exception:  # a bug: best effort still, the send meets it and says so
            log.exception("reading ahead of the message typed failed unexpectedly")
            return
        ahead.want(turn.prompt)

    def _stop_typing(self) -> None:
        if self.ahead is not None:
            self.ahead.stop()
            self.typed_ahead.emit(None)

    @Slot(object)
    def save(self, req: SaveRequest) -> None:
        with self._guard("save", req.conversation_id):
            engine = self._engine()
            req.path.parent.mkdir(parents=True, exist_ok=True)
            report = engine.call(lambda: save_conversation(
                req.path, engine.runtime, req.messages, settings=dict(req.settings),
                with_kv=req.with_kv, pictures=req.pictures)).result()
            self.saved.emit(Saved(req.conversation_id, req.path, report.with_kv))

    @Slot(object)
    def open(self, req: OpenRequest) -> None:
        with self._guard("open", req.conversation_id):
            self.progress.emit(Progress("open", text=f"Opening {req.path.name}…"))
            switched = self.host.switch_for(req.path)
            if switched is not None:
                self.loaded.emit(switched)
            engine = self.engine
            if engine is None:
                res, n_past, n_ctx = open_conversation(req.path, None), 0, 0
            else:
                res, n_past, n_ctx = engine.call(
                    lambda: open_live(req.path, engine, req.shown)).result()
            self.opened.emit(Opened(req.conversation_id, req.path, tuple(res.messages),
                                    res.settings, res.restored_kv, res.note, res.model_path,
                                    n_past if res.restored_kv else 0, n_ctx))

    @Slot(object)
    def size(self, req: SizeRequest) -> None:
        """How many tokens a conversation takes in the context (best effort: a template that
        fails, or no model, says nothing). On this thread, as a reply's prompt is prepared."""
        engine = self.engine
        if engine is None:
            return
        n_ctx = engine.runtime.ctx.n_ctx
        try:
            n = context_use(engine.runtime.target, req.messages, n_ctx)
        except (DuetError, UnicodeError) as e:
            log.info("counting a conversation's tokens: %s", e)
            return
        self.sized.emit(Sized(req.conversation_id, n, n_ctx))

    @Slot(object)
    def fetch(self, req: FetchRequest) -> None:
        with self._guard("fetch"):
            last = [0.0]

            def report(p) -> None:
                now = time.monotonic()
                if p.stage in ("download", "assemble", "verify") and \
                        now - last[0] < FETCH_PROGRESS_INTERVAL_S and p.done_bytes < p.total_bytes:
                    return
                last[0] = now
                self.progress.emit(Progress("fetch", p.done_bytes, p.total_bytes,
                                            f"{p.model_key}: {p.stage}"))

            got = [fetch.fetch(m, paths.models_dir(), progress=report, cancel=req.cancel)
                   for m in catalog.select(keys=req.keys)]
            self.fetched.emit(Fetched(tuple(got)))

    @Slot()
    def close(self) -> None:
        """Stop the engines and free every kept model and context (the worker thread, or any
        thread once it stopped)."""
        self.host.close()

    # -- helpers ---------------------------------------------------------------------------
    def _engine(self) -> Engine:
        if self.engine is None:
            raise DuetError("no model is loaded: choose a model and press Load")
        return self.engine

    def _rescued(self, saved: tuple[Path, str]) -> None:
        self.rescued = saved

    def _guard(self, op: str, conversation_id: str | None = None) -> contextlib.AbstractContextManager[None]:
        return guard(op, self.failed.emit, conversation_id)
