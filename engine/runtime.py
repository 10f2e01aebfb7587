"""Models + contexts + generator, assembled from one frozen configuration.

The CLI, the GUI worker and the benchmarks all build a ``Runtime`` the same way.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path

from engine import paths
from engine.catalog import CATALOG
from engine.context import Context, ContextParams
from engine.errors import DuetError, ModelLoadError
from engine.generate import Generator
from engine.model import Model, ModelSpec
from engine.native import NativeOwner
from engine.sampling import SamplingParams
from engine.speculative.params import DRAFTERS, SpeculativeParams

log = logging.getLogger(__name__)

STARTER_FILES = {key: model.filename for key, model in CATALOG.items()}


def resolve_model(name: str | Path) -> Path:
    """A path, or the key of a starter model in the models folder (target, draft, test)."""
    key = str(name)
    if key in STARTER_FILES:
        path = paths.models_dir() / STARTER_FILES[key]
        if not path.exists():
            raise ModelLoadError(
                f"the starter model '{key}' is not installed; run: duet-cli models fetch")
        return path
    return Path(name).expanduser()


@dataclass(frozen=True)
class RuntimeConfig:
    target: ModelSpec
    draft: ModelSpec | None = None
    context: ContextParams = ContextParams()
    draft_context: ContextParams | None = None  # default: like ``context``
    sampling: SamplingParams = SamplingParams()
    speculative: SpeculativeParams = field(default_factory=lambda: SpeculativeParams(drafter="none"))


class Runtime(NativeOwner):
    """Owns the loaded models and contexts. Not thread-safe: one owner thread."""

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.target = Model(config.target)
        self._closables: list = [self.target]
        try:
            self.ctx = Context(self.target, config.context)
            self._closables.insert(0, self.ctx)
            self.draft_model: Model | None = None
            self.draft_ctx: Context | None = None
            self.draft_problem: str | None = None  # why a configured draft model is not used
            self.speculation = self._build_speculation()
            self.generator = Generator(self.ctx, self.speculation)
        except BaseException:
            self.close()
            raise

    def _build_speculation(self):  # noqa: ANN202
        spec = self.config.speculative
        if spec.drafter == "none":
            return None
        from engine.speculative.speculator import build_speculation

        return build_speculation(self, spec)

    def close(self) -> None:
        for obj in getattr(self, "_closables", ()):
            obj.close()
        self._closables = []


def add_runtime_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="target", help="GGUF path or starter key (target, draft, test)")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--repeat-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None, help="any integer (-1: random)")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: one per core)")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers offloaded to the GPU (-1: all)")
    p.add_argument("--kv-type", choices=("f16", "q8_0"), default="f16", help="KV cache type")
    p.add_argument("--draft", default=None, help="draft model GGUF path or starter key")
    p.add_argument("--draft-gpu-layers", type=int, default=None)
    p.add_argument("--drafter", choices=DRAFTERS, default=None,
                   help="speculative drafter (default: auto with --draft, else none)")
    p.add_argument("--draft-max", type=int, default=SpeculativeParams().draft_max)
    p.add_argument("--draft-min", type=int, default=1)
    p.add_argument("--p-min", type=float, default=0.75)


def runtime_config(args: argparse.Namespace) -> RuntimeConfig:
    try:
        sampling = SamplingParams(
            temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
            repeat_penalty=args.repeat_penalty, max_tokens=args.max_tokens, stop=tuple(args.stop),
            seed=None if args.seed is None or args.seed == -1 else args.seed)  # -1: random
        drafter = args.drafter or ("auto" if args.draft else "none")
        speculative = SpeculativeParams(drafter=drafter, draft_max=args.draft_max,
                                        draft_min=args.draft_min, p_min=args.p_min)
        context = ContextParams(n_ctx=args.ctx, n_threads=args.threads, type_k=args.kv_type,
                                type_v=args.kv_type)
    except ValueError as e:
        raise DuetError(str(e)) from None
    draft = None
    if args.draft:
        gpu = args.gpu_layers if args.draft_gpu_layers is None else args.draft_gpu_layers
        draft = ModelSpec(resolve_model(args.draft), n_gpu_layers=gpu)
    elif drafter == "model":
        raise DuetError("--drafter model needs --draft PATH")
    return RuntimeConfig(target=ModelSpec(resolve_model(args.model), n_gpu_layers=args.gpu_layers),
                         draft=draft, context=context, sampling=sampling, speculative=speculative)
