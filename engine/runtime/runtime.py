"""Models, contexts and the one scheduler, assembled from one frozen configuration.

The CLI, the GUI worker and the benchmarks all build a ``Runtime`` the same way.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from engine import params, paths
from engine.cache.kv_store import DEFAULT_STORE_BYTES, KVStore
from engine.cache.params import CacheParams
from engine.cache.state_cache import DEFAULT_CACHE_BYTES, MIN_SAVE, StateCache
from engine.decode.sampling import SamplingParams
from engine.decode.scheduler import Job, Scheduler
from engine.decode.speculative.params import SpeculativeParams
from engine.errors import DuetError, LoadCancelled, ModelLoadError
from engine.events import Done
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.exactness import Exactness, exactness
from engine.llama.model import Model, ModelSpec, for_decoding
from engine.llama.native import NativeOwner
from engine.llama.placement_params import PlacementParams, gpu_layers_arg
from engine.llama.projector import Projector
from engine.llama.rpc import parse_endpoints
from engine.models.catalog import CATALOG
from engine.models.folder import local_models
from engine.models.identity import file_fingerprint
from engine.models.projector import find_projector
from engine.models.projector import problem as projector_problem
from engine.prompts.request import ready, shared_start
from engine.runtime.generate import Generator

if TYPE_CHECKING:
    from engine.decode.speculative.later import LaterCurves
    from engine.decode.speculative.speculator import Speculation

log = logging.getLogger(__name__)

STARTER_FILES = {key: model.filename for key, model in CATALOG.items()}


def resolve_model(name: str | Path) -> Path:
    """A path, the key of a starter model in the models folder (target, draft, test), or the
    file name of a model in the models folder (``smollm2-135m-instruct-q4_1.gguf``, at its top
    or in a repository's folder) where no such file is in the current folder."""
    key = str(name)
    if key in STARTER_FILES:
        path = paths.models_dir() / STARTER_FILES[key]
        if not path.exists():
            raise ModelLoadError(
                f"the starter model '{key}' is not installed; run: duet-cli models fetch")
        return path
    path = Path(name).expanduser()
    if path.exists() or path.name != key or not key.lower().endswith(".gguf"):
        return path
    folder = paths.models_dir()
    found = [p for p in local_models(folder) if p.name == key] if folder.is_dir() else []
    return found[0] if found else path


@dataclass(frozen=True)
class RuntimeConfig:
    target: ModelSpec
    draft: ModelSpec | None = None
    context: ContextParams = ContextParams()
    draft_context: ContextParams | None = None  # default: like ``context``
    sampling: SamplingParams = SamplingParams()
    speculative: SpeculativeParams = field(default_factory=lambda: SpeculativeParams(drafter="none"))
    state_cache_bytes: int = DEFAULT_CACHE_BYTES  # saved states of other conversations/versions
    kv_store_bytes: int = DEFAULT_STORE_BYTES  # long prompts' states on disk (0: none)


class Runtime(NativeOwner):
    """Owns the loaded models and contexts. Not thread-safe: one owner thread.

    ``speculation`` (None with drafter "none") owns the draft model and its context; ``cache``
    holds saved states of this model's contexts (empty for each new Runtime). ``later``: the
    verify-cost curves still to measure (``measure=False`` only; None when there are none).
    ``keep_on_close`` (the server's): ``close`` first writes each sequence's conversation to the
    disk KV store, so that after an unload or a restart its client's next request reads only
    what is new (the store otherwise keeps long reads only; a chat's turns live in the memory
    cache, and the window's and the command line's in their ``.duet`` files)."""

    keep_on_close = False

    def __init__(self, config: RuntimeConfig, on_calibrate: Callable[[], None] | None = None,
                 *, measure: bool = True, cancel: threading.Event | None = None) -> None:
        """``on_calibrate``: called before a verify-cost curve is measured (for progress).
        ``measure`` False: a curve not cached is not measured now; speculation decodes plainly
        until ``later`` has measured it (engine.decode.speculative.later), step by step. ``cancel``:
        once set, the load stops with LoadCancelled (what was loaded is freed)."""
        self.config = config
        self.speculation: Speculation | None = None
        self.speculations: list[Speculation | None] = []
        self.later: LaterCurves | None = None
        self._measure = measure
        self.cache = StateCache(config.state_cache_bytes)
        self.target: Model = Model(for_decoding(config.target, config.context.exact), cancel)
        try:
            self._load_projector(config)
            self.ctx: LlamaSequence = LlamaSequence(self.target, config.context)
            if config.kv_store_bytes > 0:
                self.cache.disk = KVStore(paths.kv_store_dir(), [self.ctx],
                                          [file_fingerprint(config.target.path)],
                                          config.kv_store_bytes)
            if config.speculative.drafter != "none":
                # lazy: the speculative decoders (with statistics and fractions, ~7 ms) load with
                # the first Runtime that drafts, not with duet-cli's parser nor the window
                from engine.decode.speculative.speculator import build_speculation

                draft = for_decoding(config.draft, config.context.exact) if config.draft else None
                self.speculation = build_speculation(self.target, self.ctx, draft,
                                                     config.speculative, config.draft_context,
                                                     on_calibrate, measure=measure,
                                                     cancel=cancel)
            if cancel is not None and cancel.is_set():
                raise LoadCancelled("loading was cancelled")
            self.opening = ready(self.target, self.ctx.n_ctx)  # what most chats start with
            self.n_template = shared_start(self.target)  # what every chat starts with
            # the other sequences' replies draft with their own n-gram drafters (a draft
            # model serves sequence 0 only)
            self.speculations = [self.speculation] + [
                self._more_speculation(ctx) for ctx in self.ctx.sequences[1:]]
            # this runtime's one decode loop over its sequences: driven on the caller's thread
            # (``generator``) or by an Engine's thread (``hand_over``), never both; the other
            # models of its pool have their own (engine.runtime.cores says who decodes when)
            self.scheduler = Scheduler(self.ctx.sequences, self.speculations, self.cache)
            self._generator: Generator | None = None
            self._handed_over = False
            if any(s is not None and s.cost is None for s in self.speculations):
                from engine.decode.speculative.later import LaterCurves  # lazy: as build_speculation

                self.later = LaterCurves(self.ctx, self.speculations)
        except BaseException:
            self.close()
            raise

    def _load_projector(self, config: RuntimeConfig) -> None:
        """The target's vision projector: the one asked for (checked by its header first), or
        one found beside the model file; closed with the model (Model.on_close)."""
        spec, path = config.target, config.target.mmproj
        if path is not None:
            why = projector_problem(path, self.target.n_embd) if path.is_file() else \
                f"projector file not found: {path}"
            if why is not None:
                raise ModelLoadError(why)
        else:
            path = find_projector(spec.path, self.target.n_embd)
        if path is not None:
            Projector(self.target, path, config.context.threads(), use_gpu=spec.n_gpu_layers != 0)

    def read_opening(self, cancel: threading.Event | None = None) -> int:
        """Read the template's opening (``opening``) into the first sequence while it is
        empty, so that the first chat without a system message reads only its own part (a
        server's model between its load and its first request). Returns the tokens read (0
        once the sequence holds anything, or on a cancel, which leaves it empty)."""
        if self.ctx.tokens or not self.opening:
            return 0
        return self.scheduler.read_ahead(0, self.opening, cancel)

    def _more_speculation(self, ctx: LlamaSequence) -> Speculation | None:
        if self.config.speculative.drafter == "none":
            return None
        from engine.decode.speculative.speculator import build_speculation  # lazy: as in __init__

        spec = replace(self.config.speculative, drafter="ngram") \
            if self.config.speculative.drafter == "model" else self.config.speculative
        return build_speculation(self.target, ctx, None, spec, measure=self._measure)

    @property
    def generator(self) -> Generator:
        """The runtime's scheduler driven on the caller's thread, one conversation on sequence 0
        (the command line, session resume, the self-check, the benchmarks). Refused once an
        Engine drives the scheduler from its own thread."""
        if self._handed_over:
            raise RuntimeError("an Engine drives this runtime's scheduler: submit jobs to it")
        if self._generator is None:
            self._generator = Generator(self.scheduler)
        return self._generator

    def hand_over(self, *, reserved: int,
                  on_finished: Callable[[Job, Done | Exception], None]) -> Scheduler:
        """The scheduler, for an Engine (engine.runtime.service) to drive from its thread from
        now on; ``reserved``: its first sequences run only jobs pinned to them."""
        if self._handed_over:
            raise RuntimeError("this runtime's scheduler is driven by another Engine already")
        self._handed_over = True
        self.scheduler.reserved, self.scheduler.on_finished = reserved, on_finished
        return self.scheduler

    @property
    def exactness(self) -> Exactness:
        """Whether this runtime's replies are exact (engine.llama.exactness): asked for, and kept
        by the build and by where the target's layers run."""
        c = self.config.context
        experts = int(self.target.metadata.get(f"{self.target.architecture}.expert_count", 0) or 0)
        return exactness(c.exact, self.config.target.n_gpu_layers, (c.type_k, c.type_v),
                         c.exact_gpu, experts > 1)

    @property
    def draft_model(self) -> Model | None:
        return self.speculation.draft_model if self.speculation else None

    @property
    def draft_ctx(self) -> LlamaSequence | None:
        return self.speculation.draft_ctx if self.speculation else None

    @property
    def draft_problem(self) -> str | None:
        """Why a configured draft model is not used (None: it is, or none was configured)."""
        return self.speculation.draft_problem if self.speculation else None

    def worker_lost(self) -> str | None:
        """The endpoint of an RPC worker of the target or draft model that went away, or None."""
        for model in (self.target, self.draft_model):
            lost = model.worker_lost() if model is not None else None
            if lost is not None:
                return lost
        return None

    @property
    def closed(self) -> bool:
        return "target" not in self.__dict__

    def _keep_conversations(self) -> None:
        disk = self.cache.disk
        if disk is None or self.worker_lost() is not None:
            return
        for seq in self.ctx.sequences:
            if seq.n_past >= MIN_SAVE:
                try:
                    disk.save([seq])
                except DuetError as e:  # the state could not be read: nothing is kept
                    log.info("a conversation was not kept on disk: %s", e)

    def close(self) -> None:
        """Free everything; afterwards ``target`` and ``ctx`` are gone (AttributeError, never a
        call into a freed llama.cpp object)."""
        later, self.later = getattr(self, "later", None), None
        if later is not None:
            later.close()
        if self.keep_on_close and "ctx" in self.__dict__:
            self._keep_conversations()
        self.cache.clear()
        if self.cache.disk is not None:
            self.cache.disk.flush()
        for obj in (*(self.speculations or [self.speculation]), self.__dict__.pop("ctx", None),
                    self.__dict__.pop("target", None)):
            if obj is not None:
                obj.close()
        self.speculation = None
        self.speculations = []




def add_runtime_arguments(p: argparse.ArgumentParser) -> None:
    """The model, context, sampling and speculation flags: the parameter table's (engine.params)
    and the models' own."""
    p.add_argument("--model", default="target", help="GGUF path or starter key (target, draft, test)")
    p.add_argument("--draft", default=None, help="draft model GGUF path or starter key")
    params.add_arguments(p, PlacementParams)
    p.add_argument("--draft-gpu-layers", type=gpu_layers_arg, default=None, metavar="N",
                   help="the draft model's GPU layers (the same range; default: --gpu-layers)")
    p.add_argument("--rpc", default=None, metavar="HOST:PORT[,...]",
                   help="run the target's layers on these duet-cli workers (ggml RPC)")
    p.add_argument("--mmproj", type=Path, default=None, metavar="FILE",
                   help="the model's vision projector (mmproj-*.gguf), so it reads images "
                        "(default: the one beside the model file, if any)")
    p.add_argument("--draft-rpc", default=None, metavar="HOST:PORT[,...]",
                   help="run the draft model's layers on these workers (default: locally)")
    p.add_argument("--tensor-split", default=None, metavar="W[,W...]",
                   help="share of each --rpc worker (default: by the memory each reports)")
    params.add_arguments(p, SamplingParams)
    params.add_arguments(p, ContextParams)
    params.add_arguments(p, SpeculativeParams)
    params.add_arguments(p, CacheParams)


def config_from_args(args: argparse.Namespace) -> RuntimeConfig:
    try:
        sampling = params.from_args(SamplingParams, args)
        speculative = params.from_args(SpeculativeParams, args)
        context = params.from_args(ContextParams, args, type_v=args.type_k)
        cache = params.from_args(CacheParams, args)
        gpu_layers = params.from_args(PlacementParams, args).gpu_layers
    except ValueError as e:
        raise DuetError(str(e)) from None
    drafter = speculative.drafter
    draft = None
    if args.draft:
        gpu = gpu_layers if args.draft_gpu_layers is None else args.draft_gpu_layers
        draft = ModelSpec(resolve_model(args.draft), n_gpu_layers=gpu,
                          rpc=endpoints(getattr(args, "draft_rpc", None)))
    elif drafter == "model":
        raise DuetError("--drafter model needs --draft PATH")
    target = ModelSpec(resolve_model(args.model), n_gpu_layers=gpu_layers,
                       rpc=endpoints(getattr(args, "rpc", None)),
                       tensor_split=tensor_split(getattr(args, "tensor_split", None)),
                       mmproj=getattr(args, "mmproj", None))
    if target.tensor_split and not target.rpc:
        raise DuetError("--tensor-split needs --rpc")
    return RuntimeConfig(target=target, draft=draft, context=context, sampling=sampling,
                         speculative=speculative, state_cache_bytes=cache.state_cache_mb << 20,
                         kv_store_bytes=cache.kv_store_mb << 20)


def endpoints(text: str | None) -> tuple[str, ...]:
    """``HOST:PORT[,...]`` -> endpoints (empty text: none); DuetError with one line if bad."""
    if not text:
        return ()
    return parse_endpoints(text)


def tensor_split(text: str | None) -> tuple[float, ...]:
    """``W[,W...]`` -> the shares (empty text: none); DuetError with one line if bad."""
    if not text:
        return ()
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise DuetError(f"--tensor-split wants numbers separated by commas, not {text!r}") from None
    if any(not x >= 0 for x in parts) or not any(parts):
        raise DuetError("--tensor-split parts must be >= 0 and not all zero")
    return parts
