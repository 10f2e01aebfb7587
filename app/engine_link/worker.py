"""The engine worker: one QObject on one QThread that loads the models into an engine service
(engine.runtime.service.Engine, which owns the contexts on its own thread) and talks to it.

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
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.engine_link.messages import (
    ChatReply,
    ChatRequest,
    Failure,
    Fetched,
    FetchRequest,
    LoadedModel,
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
from app.engine_link.relay import Relay
from app.engine_link.throttle import DEFAULT_INTERVAL_S
from engine import paths
from engine.cache.prefix import common_prefix
from engine.chat.reasoning import Thinking, thinks
from engine.conversation.session.format import read_meta
from engine.conversation.session.store import OpenResult, open_conversation, save_conversation
from engine.documents.embeddings import EmbeddingSource
from engine.errors import DecodeError, DuetError, LoadCancelled, MessageTooLongError, WorkerLostError
from engine.events import Done, Stats
from engine.llama.model import Model, check_gguf_file
from engine.models import catalog, fetch, served
from engine.models.hub.fit import FitRequest
from engine.prompts.completion import completion_turn
from engine.prompts.request import Chat, Policy, PreparedTurn, prepare
from engine.prompts.size import context_use
from engine.runtime.ahead import ReadAhead
from engine.runtime.cores import Cores
from engine.runtime.pool import Lease, LoadFailed, Pool
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model
from engine.runtime.service import Engine, Job, QueueFull
from engine.tools.prompting import result_prefix

if TYPE_CHECKING:
    from engine.decode.speculative.later import LaterCurves

log = logging.getLogger(__name__)

FETCH_PROGRESS_INTERVAL_S = 0.1


@dataclass
class Held:
    """One loaded model of the window: its settings, engine, reading ahead, retrieval vectors
    and what its load reported."""

    config: RuntimeConfig
    engine: Engine
    ahead: ReadAhead
    vectors: EmbeddingSource | None
    info: LoadedModel

    def close(self) -> None:
        self.ahead.stop()
        self.engine.close()
        if self.vectors is not None:  # (its own model: nothing else runs on it now)
            self.vectors.close()


# How often a typed prompt that waits for the engine's requests to end looks again.
TYPING_RETRY_MS = 100


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
        # the window's models: the one in use (leased, with its parts below) and those used
        # before it, kept loaded (never expiring; unloaded to make room, least recently used first)
        self.pool: Pool[Held] = Pool(ttl_s=-1, reaper=False)
        self._lease: Lease[Held] | None = None
        self.held: Held | None = None
        self.engine: Engine | None = None
        self.vectors: EmbeddingSource | None = None  # ranks retrieved passages (with an embedding model)
        self.ahead: ReadAhead | None = None  # reads the prompt being typed (engine.runtime.ahead)
        # the last TypingRequest sent (set on the GUI's thread): one queued behind a newer one,
        # or behind a message sent, is skipped (preparing it may retrieve passages: seconds)
        self.typing_latest: TypingRequest | None = None
        self.typing_deferred: TypingRequest | None = None  # waits for the engine's requests' end
        self.token_interval = token_interval
        self.rescued: tuple[Path, str] | None = None  # (file, why) saved as the process ended

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
        """Load the models; chat works as soon as they are. A target kept in the pool with the
        same settings is switched to at once (no load). A verify-cost curve not cached yet is
        measured afterwards, between replies (``Progress("calibrate")`` says how far)."""
        with self._guard("load"):
            cfg = req.config
            for spec in (cfg.target, cfg.draft):  # a bad file must not unload the working models
                if spec is not None:
                    check_gguf_file(Path(spec.path))
            name = str(Path(cfg.target.path).resolve())
            self.pool.max_loaded = max(1, req.keep)
            kept = self.pool.get(name)
            if kept is not None and kept.config == cfg and not kept.engine.runtime.closed and \
                    not req.fresh:
                self._use(self.pool.acquire(name))
                self.pool.trim()
                log.info("switched to %s (kept loaded)", kept.info.target_name)
                self.loaded.emit(replace(kept.info, load_s=0.0, switched=True, measuring=False))
                return
            self._use(None)
            if kept is not None:  # the same file with other settings (or fresh): loaded again
                self.pool.unload(name)
            need = served.memory_needed(
                (cfg.target.path, cfg.draft.path if cfg.draft else None),
                FitRequest(n_ctx=cfg.context.n_ctx, n_gpu_layers=cfg.target.n_gpu_layers,
                           exact=cfg.context.exact))
            offer = served.Offer(name, Path(cfg.target.path), bytes_needed=need)
            try:
                lease = self.pool.acquire(offer, load=lambda _, cores: self._open_model(req, cores))
            except LoadFailed as e:  # the window says what went wrong in its own words
                raise e.error from None
            self._use(lease)
            held = self._held()
            log.info("loaded %s in %.2f s (drafter %s)", held.info.target_name, held.info.load_s,
                     held.info.drafter)
            self.loaded.emit(held.info)
            later = held.engine.runtime.later
            if later is not None:
                held.engine.add_idle(CurveProgress(later, self.progress.emit, held.engine.preempt))

    def _open_model(self, req: LoadRequest, cores: Cores) -> Held:
        """Load ``req``'s models into an engine of the pool's ``cores`` (on this thread)."""
        cfg = req.config
        self.progress.emit(Progress("load", text=f"Loading {cfg.target.path.name}…"))
        t0 = time.perf_counter()
        rt = Runtime(cfg, measure=False, cancel=req.cancel)
        # the app's own conversation runs on sequence 0; with more than one, the others are
        # for the local server's clients
        engine = Engine(rt, reserved=1 if rt.ctx.params.n_parallel > 1 else 0, cores=cores)
        ahead = ReadAhead(engine, 0,
                          on_read=lambda held, total: self.typed_ahead.emit((held, total)))
        speculation = rt.speculation
        draft_model = rt.draft_model
        info = LoadedModel(
            target_path=cfg.target.path, target_name=rt.target.display_name,
            draft_path=cfg.draft.path if cfg.draft else None,
            draft_name=draft_model.display_name if draft_model is not None else None,
            drafter=getattr(speculation, "name", cfg.speculative.drafter) if speculation else "none",
            draft_problem=rt.draft_problem,
            n_ctx=rt.ctx.n_ctx, load_s=time.perf_counter() - t0,
            workers=rt.target.workers + (draft_model.workers if draft_model else ()),
            measuring=rt.later is not None, thinks=thinks(rt.target.chat_template),
            chats=rt.target.chat_template is not None)
        return Held(cfg, engine, ahead, _retrieval_vectors(engine), info)

    def _use(self, lease: Lease[Held] | None) -> None:
        """``lease``'s model is the one the window uses now (None: none while another loads);
        reading ahead on the one before stops, and its lease ends (it stays kept)."""
        self._stop_typing()
        if self._lease is not None:
            self._lease.release()
        self._lease = lease
        held = lease.value if lease is not None else None
        self.held = held
        self.engine = held.engine if held is not None else None
        self.ahead = held.ahead if held is not None else None
        self.vectors = held.vectors if held is not None else None

    def _held(self) -> Held:
        assert self.held is not None
        return self.held

    def _switch_for(self, path: Path) -> None:
        """The conversation file ``path`` was made with a model kept loaded but not in use:
        use it, so that its KV state restores there (no load; the window hears ``loaded``)."""
        try:
            target = str(Path(read_meta(path).target.path).resolve())
        except (DuetError, OSError, ValueError):
            return  # the open says what is wrong with the file
        if self._lease is not None and self._lease.offer.name == target:
            return
        kept = self.pool.get(target)
        if kept is not None and not kept.engine.runtime.closed:
            self._use(self.pool.acquire(target))
            log.info("switched to %s for %s", kept.info.target_name, path.name)
            self.loaded.emit(replace(kept.info, load_s=0.0, switched=True, measuring=False))

    def engines(self) -> list[Engine]:
        """The kept models' engines, the one in use first (the local server serves them all)."""
        current = [self.engine] if self.engine is not None else []
        return current + [e.value.engine for e in self.pool.loaded()
                          if e.value.engine is not self.engine and not e.value.engine.runtime.closed]

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
                turn = _turn(engine.runtime.target, chat, n_ctx, req.cancel)
            except DecodeError:
                if not req.cancel.is_set():
                    raise
                self.finished.emit(ChatReply(req.conversation_id, Done("cancelled", "", (), Stats()),
                                         0, n_ctx))
                return
            relay = Relay(self, req, turn)
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
        engine.read_ahead(prefix).add_done_callback(_log_read_ahead)

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
            turn = _turn(engine.runtime.target, chat, engine.runtime.ctx.n_ctx)
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
                with_kv=req.with_kv)).result()
            self.saved.emit(Saved(req.conversation_id, req.path, report.with_kv))

    @Slot(object)
    def open(self, req: OpenRequest) -> None:
        with self._guard("open", req.conversation_id):
            self.progress.emit(Progress("open", text=f"Opening {req.path.name}…"))
            self._switch_for(req.path)
            engine = self.engine
            if engine is None:
                res, n_past, n_ctx = _open(req.path, None), 0, 0
            else:
                res, n_past, n_ctx = engine.call(
                    lambda: _open_live(req.path, engine, req.shown)).result()
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
        if self._lease is not None:
            self._lease.release()
        self._lease = self.held = self.engine = self.ahead = self.vectors = None
        self.pool.close()

    # -- helpers ---------------------------------------------------------------------------
    def _engine(self) -> Engine:
        if self.engine is None:
            raise DuetError("no model is loaded: choose a model and press Load")
        return self.engine

    @contextlib.contextmanager
    def _guard(self, op: str, conversation_id: str | None = None) -> Iterator[None]:
        try:
            yield
        except LoadCancelled as e:
            log.info("%s: %s", op, e)
            self.failed.emit(Failure(op, str(e), conversation_id, cancelled=True))
        except DuetError as e:
            log.warning("%s failed: %s", op, e)
            too_long = (e.n_tokens, e.room) if isinstance(e, MessageTooLongError) else None
            self.failed.emit(Failure(op, str(e), conversation_id,
                                     worker_lost=isinstance(e, WorkerLostError), too_long=too_long))
        except MemoryError:
            log.exception("%s ran out of memory", op)
            self.failed.emit(Failure(op, "out of memory; try a smaller model or context size",
                                     conversation_id))
        except Exception as e:  # noqa: BLE001 - the worker must survive anything
            log.exception("%s failed unexpectedly", op)
            line = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            self.failed.emit(Failure(op, f"unexpected error: {line}", conversation_id))


class CurveProgress:
    """The engine's idle work after a load: one step of measuring the verify-cost curves, then
    ``Progress("calibrate", done, total)``; the last one has ``done == total`` (also when the
    measurement failed: drafting then stays off, and the text says so)."""

    def __init__(self, later: LaterCurves, emit: Callable[[Progress], None],
                 preempt: threading.Event | None = None) -> None:
        self.later, self.emit, self.preempt = later, emit, preempt

    def __call__(self) -> bool:
        later = self.later
        try:
            more = later.step(self.preempt)  # a reply that arrives stops the decode under way
        except DuetError as e:
            log.warning("measuring the verify cost failed: %s", e)
            later.close()
            self.emit(Progress("calibrate", later.total, later.total,
                               f"Could not measure this machine's speed, so no drafting: {e}"))
            return False
        self.emit(Progress("calibrate", later.done if more else later.total, later.total,
                           "" if more else "Speculative decoding is on: this machine's speed "
                           "was measured."))
        return more


def _log_read_ahead(future: Future) -> None:
    error = future.exception()
    if isinstance(error, DuetError):
        log.info("reading ahead of a tool result: %s", error)
    elif error is not None:
        log.error("reading ahead of a tool result failed", exc_info=error)


def _turn(model: Model, chat: Chat, n_ctx: int, cancel: threading.Event | None = None) -> PreparedTurn:
    """A reply's turn: the chat as the model's template renders it, or, for a model with none
    (a base model), its messages as one text to continue (engine.prompts.completion)."""
    if model.chat_template is None:
        return completion_turn(model, chat.messages, chat.sampling, n_ctx, chat.continue_text)
    return prepare(model, chat, Policy(n_ctx), cancel)


def _open(path: Path, runtime: Runtime | None) -> OpenResult:
    return open_conversation(path, runtime)


def _open_live(path: Path, engine: Engine, shown: bool = False) -> tuple[OpenResult, int, int]:
    """On the engine's thread: keep what sequence 0 holds in the state cache, then open the
    file into it (its KV state, when it fits). ``shown``: only if the file's state covers more
    than sequence 0 or the state cache already hold (else the text alone: the next reply takes
    the held state)."""
    rt = engine.runtime
    if shown:
        kv = read_meta(path).kv_target
        held = max(common_prefix(rt.ctx.tokens, kv.tokens), rt.cache.covers(kv.tokens)) \
            if kv is not None else 0
        if kv is None or held >= len(kv.tokens):
            return open_conversation(path, rt, use_kv=False), rt.ctx.n_past, rt.ctx.n_ctx
    if rt.cache.max_bytes > 0:
        rt.cache.keep(rt.ctx)
    res = _open(path, rt)
    return res, rt.ctx.n_past, rt.ctx.n_ctx


def _retrieval_vectors(engine: Engine) -> EmbeddingSource | None:
    """The embeddings that rank a large attachment's passages with BM25, as the server's
    ``/v1/embeddings`` makes them, on the engine's thread: the catalog's embedding model when
    it is installed (``duet-cli models fetch embed``). Without it, BM25 alone: the chat model's
    own pooled states would read every candidate passage again, far slower than the answer."""
    try:
        path = resolve_model("embed")
    except DuetError:
        return None
    return EmbeddingSource(engine.runtime.target, path, lambda fn: engine.call(fn).result())
