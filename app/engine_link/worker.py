"""The engine worker: one QObject on one QThread that loads the models into an engine service
(engine.runtime.service.Engine, which owns the contexts on its own thread) and talks to it.

The GUI reaches the worker only through queued signals carrying the frozen requests of
``app.engine_link.messages``, and hears back through the signals below. A chat is queued on the engine,
pinned to sequence 0 (the app's conversation; the local server's clients get the others, and
share the same model in memory); its events are relayed from the engine's thread, tokens
coalesced (at most one ``tokens`` batch per ~33 ms, and a final flush before ``finished``).
Saving and opening run on the engine's thread between two of its steps. Every slot catches what
it raises: a DuetError becomes ``failed`` with its one-line message, anything else is logged
with its traceback and reported in one line; no thread dies of an exception.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot

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
    RescuePlan,
    Saved,
    SaveRequest,
    TokenBatch,
    TypingRequest,
)
from app.engine_link.throttle import DEFAULT_INTERVAL_S, Coalescer
from engine import paths
from engine.cache.prefix import common_prefix
from engine.chat.messages import Message, ToolCall
from engine.chat.reasoning import CLOSE, OPEN, Thinking, thinks
from engine.conversation.session.format import read_meta
from engine.conversation.session.meta import MAX_TOOL_CALLS
from engine.conversation.session.store import OpenResult, open_conversation, save_conversation
from engine.conversation.store import cut_reply
from engine.documents.embeddings import EmbeddingSource
from engine.errors import DecodeError, DuetError, LoadCancelled, MessageTooLongError, WorkerLostError
from engine.events import Done, PromptProgress, Stats, Token
from engine.llama import rescue
from engine.llama.model import check_gguf_file
from engine.models import catalog, fetch, served
from engine.models.hub.fit import FitRequest, machine
from engine.prompts.request import Call, Chat, Piece, Policy, PreparedTurn, Reader, Text, prepare
from engine.runtime.ahead import ReadAhead
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model
from engine.runtime.service import Engine, Job, QueueFull
from engine.runtime.shelf import Shelf
from engine.tools.prompting import result_prefix

if TYPE_CHECKING:
    from engine.decode.speculative.later import LaterCurves
    from engine.prompts.attachments import Source

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

    def __init__(self, token_interval: float = DEFAULT_INTERVAL_S) -> None:
        super().__init__()
        # the model in use, and its parts below; the shelf keeps it and those used before
        self.held: Held | None = None
        self.shelf: Shelf[Path, Held] = Shelf()
        self.engine: Engine | None = None
        self.vectors: EmbeddingSource | None = None  # ranks retrieved passages (with an embedding model)
        self.ahead: ReadAhead | None = None  # reads the prompt being typed (engine.runtime.ahead)
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
        """Load the models; chat works as soon as they are. A target kept on the shelf with the
        same settings is switched to at once (no load). A verify-cost curve not cached yet is
        measured afterwards, between replies (``Progress("calibrate")`` says how far)."""
        with self._guard("load"):
            cfg = req.config
            for spec in (cfg.target, cfg.draft):  # a bad file must not unload the working models
                if spec is not None:
                    check_gguf_file(Path(spec.path))
            key = Path(cfg.target.path).resolve()
            self.shelf.max_kept = max(1, req.keep)
            held = self.shelf.take(key)
            if held is not None and held.config == cfg and not held.engine.runtime.closed and \
                    not req.fresh:
                self._use(held)
                for gone in self.shelf.trim():
                    gone.close()
                log.info("switched to %s (kept loaded)", held.info.target_name)
                self.loaded.emit(replace(held.info, load_s=0.0, switched=True, measuring=False))
                return
            if held is not None:  # the same file with other settings (or fresh): loaded again
                self.shelf.remove(key)
                held.close()
            self._use(None)
            need = served.memory_needed(
                (cfg.target.path, cfg.draft.path if cfg.draft else None),
                FitRequest(n_ctx=cfg.context.n_ctx, n_gpu_layers=cfg.target.n_gpu_layers,
                           exact=cfg.context.exact))
            for gone in self.shelf.room_for(need, _memory_free()):
                log.info("unloading %s to make room", gone.info.target_name)
                gone.close()
            self.progress.emit(Progress("load", text=f"Loading {cfg.target.path.name}…"))
            t0 = time.perf_counter()
            rt = Runtime(cfg, measure=False, cancel=req.cancel)
            # the app's own conversation runs on sequence 0; with more than one, the others are
            # for the local server's clients
            engine = Engine(rt, reserved=1 if rt.ctx.params.n_parallel > 1 else 0)
            ahead = ReadAhead(engine, 0,
                              on_read=lambda held, total: self.typed_ahead.emit((held, total)))
            speculation = rt.speculation
            draft_model = rt.draft_model
            later = rt.later
            info = LoadedModel(
                target_path=cfg.target.path, target_name=rt.target.display_name,
                draft_path=cfg.draft.path if cfg.draft else None,
                draft_name=draft_model.display_name if draft_model is not None else None,
                drafter=getattr(speculation, "name", cfg.speculative.drafter) if speculation else "none",
                draft_problem=rt.draft_problem,
                n_ctx=rt.ctx.n_ctx, load_s=time.perf_counter() - t0,
                workers=rt.target.workers + (draft_model.workers if draft_model else ()),
                measuring=later is not None, thinks=thinks(rt.target.chat_template))
            held = Held(cfg, engine, ahead, _retrieval_vectors(engine), info)
            self.shelf.put(key, held, need)
            self._use(held)
            log.info("loaded %s in %.2f s (drafter %s)", info.target_name, info.load_s, info.drafter)
            self.loaded.emit(info)
            if later is not None:
                engine.add_idle(CurveProgress(later, self.progress.emit, engine.preempt))

    def _use(self, held: Held | None) -> None:
        """``held`` is the model the window uses now (None: none while another loads); reading
        ahead on the one before stops."""
        self._stop_typing()
        self.held = held
        self.engine = held.engine if held is not None else None
        self.ahead = held.ahead if held is not None else None
        self.vectors = held.vectors if held is not None else None

    def _switch_for(self, path: Path) -> None:
        """The conversation file ``path`` was made with a model kept loaded but not in use:
        use it, so that its KV state restores there (no load; the window hears ``loaded``)."""
        try:
            target = Path(read_meta(path).target.path).resolve()
        except (DuetError, OSError, ValueError):
            return  # the open says what is wrong with the file
        held = self.shelf.take(target) if self.held is None or \
            Path(self.held.config.target.path).resolve() != target else None
        if held is not None and not held.engine.runtime.closed:
            self._use(held)
            log.info("switched to %s for %s", held.info.target_name, path.name)
            self.loaded.emit(replace(held.info, load_s=0.0, switched=True, measuring=False))

    def engines(self) -> list[Engine]:
        """The kept models' engines, the one in use first (the local server serves them all)."""
        current = [self.engine] if self.engine is not None else []
        return current + [h.engine for h in self.shelf.values()
                          if h.engine is not self.engine and not h.engine.runtime.closed]

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
                turn = prepare(engine.runtime.target, chat, Policy(n_ctx), req.cancel)
            except DecodeError:
                if not req.cancel.is_set():
                    raise
                self.finished.emit(ChatReply(req.conversation_id, Done("cancelled", "", (), Stats()),
                                         0, n_ctx))
                return
            relay = _Relay(self, req, turn)
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
        if req.messages is None:
            self._stop_typing()
            return
        chat = Chat(req.messages, req.sampling, req.tools, thinking=Thinking(on=req.thinking),
                    embed=self.vectors.embed if self.vectors is not None else None)
        try:
            turn = prepare(engine.runtime.target, chat, Policy(engine.runtime.ctx.n_ctx))
        except (DuetError, UnicodeError) as e:
            log.info("reading ahead of the message typed: %s", e)
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
        self.held = self.engine = self.ahead = self.vectors = None
        for held in self.shelf.clear():
            held.close()

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


class _Relay:
    """One reply's events, on the engine's thread, turned into the worker's signals: tokens
    coalesced (with tools, the calls taken out by the turn's reader), the reply so far kept for
    a rescue if an RPC worker dies mid-pass."""

    def __init__(self, worker: EngineWorker, req: ChatRequest, turn: PreparedTurn) -> None:
        self.worker, self.req, self.dropped = worker, req, turn.dropped
        self.sources = sources_in_words(turn.sources)
        self.batches: Coalescer[Token] = Coalescer(worker.token_interval)
        self.parts: list[str] = []  # the reply so far
        self.reader = Reader(turn)
        self.shown: list[str] = []  # the text released (calls taken out)
        self.calls: list[ToolCall] = []
        self.runtime = worker.runtime
        self.hook = self._rescue_hook()
        # a reasoning model's thinking comes split from its answer (engine.prompts.request.Reader);
        # the window folds a <think> section in the text, so the markers are put back around
        # it, the opening one too where the prompt opened the section (DeepSeek-R1's template)
        self.opening = OPEN if turn.think is not None and turn.think.inside else ""
        self.thinking = False

    def emit(self, item: object) -> None:
        w, cid = self.worker, self.req.conversation_id
        try:
            if isinstance(item, Token):
                self.parts.append(item.text)
                for tok in self._shown(self.reader.feed(item)):
                    batch = self.batches.add(tok, boundary=tok.step_end)
                    if batch:
                        w.tokens.emit(TokenBatch(cid, tuple(batch), *self._fill()))
            elif isinstance(item, PromptProgress):
                w.progress.emit(Progress("prompt", item.done, item.total))
            elif isinstance(item, Done):
                self.end()
                self._shown(self.reader.feed(item))
                if self.reader.reads_calls:  # the reply's text is what is left of the calls
                    item = replace(item, text="".join(self.shown))
                if self.opening and not item.text.lstrip().startswith(OPEN):
                    item = replace(item, text=OPEN + item.text)
                rest = self.batches.flush()
                if rest:
                    w.tokens.emit(TokenBatch(cid, tuple(rest), *self._fill()))
                ctx = self.runtime.ctx if self.runtime is not None and not self.runtime.closed else None
                w.finished.emit(ChatReply(cid, item, ctx.n_past if ctx else 0, ctx.n_ctx if ctx else 0,
                                      self.dropped, item.note, tuple(self.calls), self.sources))
            elif isinstance(item, Exception):
                self.end()
                log.warning("chat failed: %s", item)
                w.failed.emit(Failure("chat", _line(item), cid,
                                      worker_lost=isinstance(item, WorkerLostError)))
        except Exception:  # never let a relay break the engine's thread
            log.exception("relaying a reply's event failed")

    def _fill(self) -> tuple[int, int]:
        """The context's fill now, and its size (on the engine's thread, which owns it)."""
        rt = self.runtime
        return (rt.ctx.n_past, rt.ctx.n_ctx) if rt is not None and not rt.closed else (0, 0)

    def _shown(self, pieces: list[Piece]) -> list[Token]:
        """The tokens to show for ``pieces``: each text piece as its token with that text (a
        call's text is never shown); the calls kept."""
        out = []
        for p in pieces:
            if isinstance(p, Call):
                if len(self.calls) < MAX_TOOL_CALLS:  # (more than a file may hold are dropped)
                    self.calls.append(p.call)
            elif isinstance(p, Text):
                p = self._marked(p)
                self.shown.append(p.text)
                if p.source is not None and (p.text or not self.reader.reads_calls):
                    out.append(p.source if p.text == p.source.text else replace(p.source, text=p.text))
        return out

    def _marked(self, p: Text) -> Text:
        """``p`` with the <think> section's markers where its thinking starts and ends."""
        if p.thinking and not self.thinking and p.text:
            self.thinking = True
            return replace(p, text=OPEN + p.text)
        if not p.thinking and self.thinking and p.text:
            self.thinking = False
            return replace(p, text=CLOSE + p.text)
        return p

    def end(self) -> None:
        if self.hook is not None:
            rescue.remove(self.hook)
            self.hook = None

    def _rescue_hook(self) -> Callable[[str], None] | None:
        """While the reply runs: if an RPC worker dies mid-pass (the process then ends, see
        engine.llama.rescue), save the conversation with the reply so far, marked as cut."""
        plan, rt, req = self.req.rescue, self.runtime, self.req
        if plan is None or rt is None or not (rt.config.target.rpc or
                                              (rt.config.draft and rt.config.draft.rpc)):
            return None

        def save(why: str) -> None:
            text = (req.continue_text or "") + "".join(self.parts)
            self.worker.rescued = (save_cut(plan, rt, req.messages, text), why)

        rescue.add(save)
        return save


def sources_in_words(sources: Sequence[Source]) -> tuple[str, ...]:
    """"manual.pdf (whole)", "codes.pdf p. 136, 137 (passages)": one line per file."""
    pages: dict[str, list[int]] = {}
    whole: list[str] = []
    for s in sources:
        if s.mode == "whole":
            whole.append(s.name)
        else:
            pages.setdefault(s.name, []).extend([s.page] if s.page is not None else [])
    out = [f"{name} (whole)" for name in whole]
    for name, ps in pages.items():
        where = f" p. {', '.join(str(p) for p in sorted(set(ps)))}" if ps else ""
        out.append(f"{name}{where} (passages)")
    return tuple(out)


def _log_read_ahead(future: Future) -> None:
    error = future.exception()
    if isinstance(error, DuetError):
        log.info("reading ahead of a tool result: %s", error)
    elif error is not None:
        log.error("reading ahead of a tool result failed", exc_info=error)


def _line(e: BaseException) -> str:
    return str(e) if isinstance(e, DuetError) else \
        "unexpected error: " + " ".join(f"{type(e).__name__}: {e}".split())[:300]


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


def save_cut(plan: RescuePlan, rt: Runtime, messages: tuple[Message, ...], text: str) -> Path:
    """Write the conversation of ``plan`` with the reply ``text`` cut where it stopped: the text
    alone (no llama.cpp call: it runs while ggml aborts)."""
    settings = dict(plan.settings)
    settings["tree"] = cut_reply(settings["tree"], plan.node, text)
    plan.path.parent.mkdir(parents=True, exist_ok=True)
    save_conversation(plan.path, rt, (*messages, Message("assistant", text, time.time())),
                      settings=settings, with_kv=False)
    return plan.path


def _memory_free() -> int:
    """The memory available now (unknown: no limit, the count of kept models alone holds)."""
    try:
        return machine().ram_available
    except (AttributeError, ValueError, OSError):  # (no sysconf: not a POSIX system)
        return 1 << 62


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
