"""The window's models (the worker's half that holds them): a pool (engine.runtime.pool) of
loaded models, the one in use leased, and those used before kept loaded (never expiring;
unloaded to make room, least recently used first), so that going back to one is a switch.

Each is a ``Held``: its settings, its engine service (engine.runtime.service.Engine, which owns
its contexts on its own thread), its reading ahead and retrieval vectors, and what its load
reported. Everything here runs on the worker's thread (app.engine_link.worker dispatches to
it); ``engines`` may be asked from any thread (the pool has a lock).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.engine_link.messages import LoadedModel, LoadRequest, Progress
from engine.chat.reasoning import thinks
from engine.conversation.session.format import read_meta
from engine.documents.embeddings import EmbeddingSource
from engine.errors import DuetError
from engine.llama.model import check_gguf_file
from engine.models import served
from engine.models.hub.fit import FitRequest
from engine.runtime.ahead import ReadAhead
from engine.runtime.cores import Cores
from engine.runtime.pool import Lease, LoadFailed, Pool
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model
from engine.runtime.service import Engine

if TYPE_CHECKING:
    from engine.decode.speculative.later import LaterCurves

log = logging.getLogger(__name__)


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


class ModelHost:
    """The window's pool and the model in use (``held``, None while none is).

    ``progress``: a load's and a measurement's progress; ``on_read(held, total)``: the typed
    prompt's tokens read ahead (engine.runtime.ahead); ``leaving``: called before the model in
    use changes (reading ahead on it stops)."""

    def __init__(self, progress: Callable[[Progress], None], on_read: Callable[[int, int], None],
                 leaving: Callable[[], None]) -> None:
        self.pool: Pool[Held] = Pool(ttl_s=-1, reaper=False)
        self.held: Held | None = None
        self._lease: Lease[Held] | None = None
        self._progress, self._on_read, self._leaving = progress, on_read, leaving

    @property
    def engine(self) -> Engine | None:
        return self.held.engine if self.held is not None else None

    def load(self, req: LoadRequest) -> LoadedModel:
        """Use ``req``'s models: a target kept with the same settings is switched to at once
        (its info says ``switched``), else loaded (blocking; its info says ``measuring`` when
        a verify-cost curve is not cached yet: ``measure`` starts that)."""
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
            return replace(kept.info, load_s=0.0, switched=True, measuring=False)
        self._use(None)
        if kept is not None:  # the same file with other settings (or fresh): loaded again
            self.pool.unload(name)
        need = served.memory_needed(
            (cfg.target.path, cfg.draft.path if cfg.draft else None),
            FitRequest(n_ctx=cfg.context.n_ctx, n_gpu_layers=cfg.target.n_gpu_layers,
                       exact=cfg.context.exact))
        offer = served.ModelOffer(name, Path(cfg.target.path), bytes_needed=need)
        try:
            lease = self.pool.acquire(offer, load=lambda _, cores: self._open(req, cores))
        except LoadFailed as e:  # the window says what went wrong in its own words
            raise e.error from None
        self._use(lease)
        held = lease.value
        log.info("loaded %s in %.2f s (drafter %s)", held.info.target_name, held.info.load_s,
                 held.info.drafter)
        return held.info

    def measure(self) -> None:
        """Measure the verify-cost curves the model in use lacks, between its replies
        (``Progress("calibrate")`` says how far)."""
        held = self.held
        later = held.engine.runtime.later if held is not None else None
        if held is not None and later is not None:
            held.engine.add_idle(CurveProgress(later, self._progress, held.engine.preempt))

    def switch_for(self, path: Path) -> LoadedModel | None:
        """The conversation file ``path`` was made with a model kept loaded but not in use:
        use it, so that its KV state restores there (no load); its info, or None (no switch)."""
        try:
            target = str(Path(read_meta(path).target.path).resolve())
        except (DuetError, OSError, ValueError):
            return None  # the open says what is wrong with the file
        if self._lease is not None and self._lease.offer.name == target:
            return None
        kept = self.pool.get(target)
        if kept is None or kept.engine.runtime.closed:
            return None
        self._use(self.pool.acquire(target))
        log.info("switched to %s for %s", kept.info.target_name, path.name)
        return replace(kept.info, load_s=0.0, switched=True, measuring=False)

    def engines(self) -> list[Engine]:
        """The kept models' engines, the one in use first (the local server serves them all)."""
        current = self.engine
        return ([current] if current is not None else []) + [
            e.value.engine for e in self.pool.loaded()
            if e.value.engine is not current and not e.value.engine.runtime.closed]

    def close(self) -> None:
        """Free every kept model (their engines stop)."""
        if self._lease is not None:
            self._lease.release()
        self._lease = self.held = None
        self.pool.close()

    def _use(self, lease: Lease[Held] | None) -> None:
        """``lease``'s model is the one in use now (None: none while another loads); the one
        before stays kept, its lease ended."""
        self._leaving()
        if self._lease is not None:
            self._lease.release()
        self._lease = lease
        self.held = lease.value if lease is not None else None

    def _open(self, req: LoadRequest, cores: Cores) -> Held:
        """Load ``req``'s models into an engine of the pool's ``cores``."""
        cfg = req.config
        self._progress(Progress("load", text=f"Loading {cfg.target.path.name}…"))
        t0 = time.perf_counter()
        rt = Runtime(cfg, measure=False, cancel=req.cancel)
        # the app's own conversation runs on sequence 0; with more than one, the others are
        # for the local server's clients
        engine = Engine(rt, reserved=1 if rt.ctx.params.n_parallel > 1 else 0, cores=cores)
        draft_model = rt.draft_model
        info = LoadedModel(
            target_path=cfg.target.path, target_name=rt.target.display_name,
            draft_path=cfg.draft.path if cfg.draft else None,
            draft_name=draft_model.display_name if draft_model is not None else None,
            drafter=getattr(rt.speculation, "name", cfg.speculative.drafter)
            if rt.speculation else "none",
            draft_problem=rt.draft_problem,
            n_ctx=rt.ctx.n_ctx, load_s=time.perf_counter() - t0,
            workers=rt.target.workers + (draft_model.workers if draft_model else ()),
            measuring=rt.later is not None, thinks=thinks(rt.target.chat_template),
            chats=rt.target.chat_template is not None,
            projector=rt.target.projector.name if rt.target.projector is not None else None)
        return Held(cfg, engine, ReadAhead(engine, 0, on_read=self._on_read),
                    _retrieval_vectors(engine), info)


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
