"""The engine worker: one QObject on one QThread owns the Runtime (models and llama contexts).

The GUI reaches it only through queued signals carrying the frozen requests of
``app.requests``, and hears back through the signals below. Tokens are coalesced (at most one
``tokens`` batch per ~33 ms, and a final flush before ``finished``). Every slot catches what it
raises: a DuetError becomes ``failed`` with its one-line message, anything else is logged with
its traceback and reported in one line; the thread never dies of an exception.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Iterator

from PySide6.QtCore import QObject, Signal, Slot

from engine import paths
from engine import rescue
from engine.chat import Message
from engine.conversation.store import cut_reply
from engine.errors import DuetError, WorkerLostError
from engine.model import check_gguf_file
from engine.prompt import chat_tokens
from engine.events import Done, PromptProgress, Token
from engine.runtime import Runtime

from app.requests import (ChatRequest, Failure, FetchRequest, Fetched, LoadRequest, ModelInfo,
                          Opened, OpenRequest, Progress, Reply, RescuePlan, SaveRequest, Saved,
                          TokenBatch)
from app.throttle import DEFAULT_INTERVAL_S, Coalescer

log = logging.getLogger(__name__)

FETCH_PROGRESS_INTERVAL_S = 0.1


class EngineWorker(QObject):
    loaded = Signal(object)  # ModelInfo
    progress = Signal(object)  # Progress
    tokens = Signal(object)  # TokenBatch
    finished = Signal(object)  # Reply
    saved = Signal(object)  # Saved
    opened = Signal(object)  # Opened
    fetched = Signal(object)  # Fetched
    failed = Signal(object)  # Failure

    def __init__(self, token_interval: float = DEFAULT_INTERVAL_S) -> None:
        super().__init__()
        self.runtime: Runtime | None = None
        self.token_interval = token_interval
        self.rescued: tuple[Path, str] | None = None  # (file, why) saved as the process ended

    # -- slots (run on the worker thread) --------------------------------------------------
    @Slot(object)
    def load(self, req: LoadRequest) -> None:
        with self._guard("load"):
            cfg = req.config
            for spec in (cfg.target, cfg.draft):  # a bad file must not unload the working models
                if spec is not None:
                    check_gguf_file(Path(spec.path))
            self.close()
            self.progress.emit(Progress("load", text=f"Loading {cfg.target.path.name}…"))
            t0 = time.perf_counter()
            rt = Runtime(cfg, on_calibrate=lambda: self.progress.emit(Progress("calibrate", text=(
                "Measuring what a verification pass costs on this machine, once for this model "
                "and these settings (up to a minute; speculative decoding drafts by it)…"))))
            self.runtime = rt
            spec = rt.speculation
            draft_model = rt.draft_model
            info = ModelInfo(
                target_path=cfg.target.path, target_name=rt.target.display_name,
                draft_path=cfg.draft.path if cfg.draft else None,
                draft_name=draft_model.display_name if draft_model is not None else None,
                drafter=getattr(spec, "name", cfg.speculative.drafter) if spec else "none",
                draft_problem=rt.draft_problem,
                n_ctx=rt.ctx.n_ctx, load_s=time.perf_counter() - t0,
                workers=rt.target.workers + (draft_model.workers if draft_model else ()),
                worker_lost=rt.worker_lost)
            log.info("loaded %s in %.2f s (drafter %s)", info.target_name, info.load_s, info.drafter)
            self.loaded.emit(info)

    @Slot(object)
    def chat(self, req: ChatRequest) -> None:
        parts: list[str] = []  # the reply so far, for a rescue if a worker dies mid-pass
        with self._guard("chat", req.conversation_id), self._rescue(req, parts):
            rt = self._runtime()
            batches: Coalescer[Token] = Coalescer(self.token_interval)
            dropped = 0
            if req.continue_text is not None:  # the reply goes on from its text (Continue)
                model = rt.generator.model
                prompt = chat_tokens(model, req.messages) + model.tokenize(
                    req.continue_text, add_special=False, parse_special=False)
                events = rt.generator.complete(prompt, req.sampling, req.cancel)
            else:
                events = rt.generator.chat(req.messages, req.sampling, req.cancel)
                dropped = getattr(rt.generator, "last_dropped", 0)
            for event in events:
                if isinstance(event, Token):
                    parts.append(event.text)
                    batch = batches.add(event, boundary=event.step_end)
                    if batch:
                        self.tokens.emit(TokenBatch(req.conversation_id, tuple(batch)))
                elif isinstance(event, PromptProgress):
                    self.progress.emit(Progress("prompt", event.done, event.total))
                elif isinstance(event, Done):
                    rest = batches.flush()
                    if rest:
                        self.tokens.emit(TokenBatch(req.conversation_id, tuple(rest)))
                    self.finished.emit(Reply(req.conversation_id, event, rt.ctx.n_past,
                                             rt.ctx.n_ctx, dropped,
                                             getattr(rt.generator, "shift_note", None)))

    @Slot(object)
    def save(self, req: SaveRequest) -> None:
        with self._guard("save", req.conversation_id):
            from engine.session.store import save_conversation

            rt = self._runtime()
            req.path.parent.mkdir(parents=True, exist_ok=True)
            report = save_conversation(req.path, rt, req.messages, settings=dict(req.settings),
                                       with_kv=req.with_kv)
            self.saved.emit(Saved(req.conversation_id, req.path, report.with_kv))

    @Slot(object)
    def open(self, req: OpenRequest) -> None:
        with self._guard("open", req.conversation_id):
            from engine.session.store import open_conversation

            self.progress.emit(Progress("open", text=f"Opening {req.path.name}…"))
            res = open_conversation(req.path, self.runtime)
            ctx = self.runtime.ctx if self.runtime is not None else None
            self.opened.emit(Opened(req.conversation_id, req.path, tuple(res.messages),
                                    res.settings, res.restored_kv, res.note, res.model_path,
                                    ctx.n_past if ctx is not None and res.restored_kv else 0,
                                    ctx.n_ctx if ctx is not None else 0))

    @Slot(object)
    def fetch(self, req: FetchRequest) -> None:
        with self._guard("fetch"):
            from engine import catalog
            from engine.fetch import fetch

            last = [0.0]

            def report(p) -> None:
                now = time.monotonic()
                if p.stage in ("download", "assemble", "verify") and \
                        now - last[0] < FETCH_PROGRESS_INTERVAL_S and p.done_bytes < p.total_bytes:
                    return
                last[0] = now
                self.progress.emit(Progress("fetch", p.done_bytes, p.total_bytes,
                                            f"{p.model_key}: {p.stage}"))

            got = [fetch(m, paths.models_dir(), progress=report, cancel=req.cancel)
                   for m in catalog.select(keys=req.keys)]
            self.fetched.emit(Fetched(tuple(got)))

    @Slot()
    def close(self) -> None:
        """Free the models and contexts (the worker thread, or any thread once it stopped)."""
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None

    # -- helpers ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _rescue(self, req: ChatRequest, parts: list[str]) -> Iterator[None]:
        """While the reply runs: if an RPC worker dies mid-pass (the process then ends, see
        engine.rescue), save the conversation with the reply so far, marked as cut."""
        plan, rt = req.rescue, self.runtime
        if plan is None or rt is None or not (rt.config.target.rpc or
                                              (rt.config.draft and rt.config.draft.rpc)):
            yield
            return

        def save(why: str) -> None:
            text = (req.continue_text or "") + "".join(parts)
            self.rescued = (save_cut(plan, rt, req.messages, text), why)

        with rescue.hook(save):
            yield

    def _runtime(self) -> Runtime:
        if self.runtime is None:
            raise DuetError("no model is loaded: choose a model and press Load")
        return self.runtime

    @contextlib.contextmanager
    def _guard(self, op: str, conversation_id: str | None = None) -> Iterator[None]:
        try:
            yield
        except DuetError as e:
            log.warning("%s failed: %s", op, e)
            self.failed.emit(Failure(op, str(e), conversation_id,
                                     worker_lost=isinstance(e, WorkerLostError)))
        except MemoryError:
            log.exception("%s ran out of memory", op)
            self.failed.emit(Failure(op, "out of memory; try a smaller model or context size",
                                     conversation_id))
        except Exception as e:  # noqa: BLE001 - the worker must survive anything
            log.exception("%s failed unexpectedly", op)
            line = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            self.failed.emit(Failure(op, f"unexpected error: {line}", conversation_id))



def save_cut(plan: RescuePlan, rt: Runtime, messages: tuple[Message, ...], text: str) -> Path:
    """Write the conversation of ``plan`` with the reply ``text`` cut where it stopped: the text
    alone (no llama.cpp call: it runs while ggml aborts)."""
    from engine.session.store import save_conversation

    settings = dict(plan.settings)
    settings["tree"] = cut_reply(settings["tree"], plan.node, text)
    plan.path.parent.mkdir(parents=True, exist_ok=True)
    save_conversation(plan.path, rt, (*messages, Message("assistant", text, time.time())),
                      settings=settings, with_kv=False)
    return plan.path
