"""``python -m bench exact``: the same request gives the same reply, whatever drafting, caches or
parallel sequences do.

Each open prompt (resources/bench/open_prompts.json, behind one long system prompt so that the
disk KV store keeps it) is answered greedily once as the reference: a fresh context, nothing
cached, plain decoding. Then under each condition, and the replies' token ids are compared:

- ``ngram``, ``model``, ``auto``: drafted (``model`` with ``--draft``);
- ``warm``: asked again on the context that holds it (only its last token is read again);
- ``memory``: asked again after another prompt took the context (restored from the state cache);
- ``disk``: asked in a new runtime whose disk KV store holds it (restored from disk);
- ``parallel``: asked with three other prompts in one batch (four sequences);
- ``batch64``: the prompt read in batches of 64;
- ``seeded``: sampled (temperature 0.8, a seed) with and without the n-gram drafter.

``--mmproj FILE --image-prompts N``: the first N prompts carry a picture each (seeded colour
blocks; with scripts/make_test_projector.py's projector where no real one is at hand), read by
the projector: the same conditions hold for image prompts (a draft model never drafts after a
picture it did not see: ``model`` decodes those replies plainly).

The report counts the replies that differ from the reference (the target: none) and where.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import PIL.Image

from bench.prompts import RESOURCES
from engine.chat.fit import chat_tokens
from engine.chat.messages import Image, Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.events import Done
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model
from engine.runtime.service import Engine, Job
from engine.vision.prompt import image_tokens

log = logging.getLogger(__name__)

SYSTEM = ("You are a helpful assistant. Answer plainly and briefly; do not invent facts; when a "
          "question is ambiguous, say which reading you answer. ") * 12
CONDITIONS = ("ngram", "model", "auto", "warm", "memory", "disk", "parallel", "batch64", "seeded")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("exact", help="the same request, the same reply: drafting, caches, parallel")
    p.add_argument("--model", default="target")
    p.add_argument("--draft", default=None, help="a draft model for the 'model' condition")
    p.add_argument("--prompts", type=int, default=32, help="how many open prompts (at most 32)")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--gpu-layers", type=int, default=0, help="layers on the GPU (-1: all)")
    p.add_argument("--exact-gpu", action="store_true",
                   help="exact on a Vulkan GPU too (ContextParams.exact_gpu)")
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument("--mmproj", type=Path, default=None, help="the model's vision projector")
    p.add_argument("--image-prompts", type=int, default=0,
                   help="how many of the prompts carry a picture (needs --mmproj)")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


def _config(path: Path, drafter: str = "none", draft: Path | None = None, gpu_layers: int = 0,
            mmproj: Path | None = None, **context: Any) -> RuntimeConfig:
    ctx = ContextParams(n_ctx=2048, **context)
    return RuntimeConfig(target=ModelSpec(path, n_gpu_layers=gpu_layers, mmproj=mmproj),
                         draft=ModelSpec(draft, n_gpu_layers=gpu_layers) if draft else None, context=ctx,
                         speculative=SpeculativeParams(drafter=drafter, adaptive=False),
                         kv_store_bytes=0)


def _open(config: RuntimeConfig, pictures: tuple[Image, ...]) -> Runtime:
    """A runtime whose projector has seen ``pictures`` (the prompts are token ids: their image
    positions name pictures the projector must know)."""
    rt = Runtime(config)
    if pictures:
        image_tokens(rt.target, pictures)
    return rt


def picture(seed: int) -> Image:
    """A photo-sized picture of seeded colour blocks (JPEG)."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
    buf = io.BytesIO()
    PIL.Image.fromarray(np.kron(blocks, np.ones((40, 40, 1), np.uint8))).save(buf, "JPEG", quality=90)
    return Image(buf.getvalue(), f"picture-{seed}.jpg")


def _reply(rt: Runtime, prompt: list[int], params: SamplingParams) -> tuple[int, ...]:
    done = [e for e in rt.generator.complete(prompt, params) if isinstance(e, Done)][-1]
    return done.token_ids


def _cold(config: RuntimeConfig, prompts: list[list[int]], params: SamplingParams,
          pictures: tuple[Image, ...] = ()) -> list[tuple[int, ...]]:
    out = []
    with _open(config, pictures) as rt:
        for p in prompts:
            rt.ctx.clear()
            if rt.speculation is not None:
                rt.speculation.reset()
            out.append(_reply(rt, p, params))
    return out


class _Group:
    """The ends of a group's replies, by position; ``ended`` once every one has ended."""

    def __init__(self, n: int) -> None:
        self.dones: dict[int, tuple[int, ...]] = {}
        self.n, self.ended = n, threading.Event()

    def emit(self, k: int) -> Callable[[object], None]:
        def put(item: object) -> None:
            if isinstance(item, Done | Exception):
                self.dones[k] = item.token_ids if isinstance(item, Done) else ()
                if len(self.dones) == self.n:
                    self.ended.set()
        return put


def _parallel(config: RuntimeConfig, prompts: list[list[int]], params: SamplingParams,
              pictures: tuple[Image, ...] = ()) -> list[tuple[int, ...]]:
    """Each prompt answered in one batch with the next three (four sequences, started together)."""
    out: list[tuple[int, ...]] = []
    with _open(replace(config, context=replace(config.context, n_parallel=4, n_ctx=8192)), pictures) as rt:
        engine = Engine(rt)
        try:
            for i in range(len(prompts)):
                group = _Group(4)
                for k in range(4):
                    engine.submit(Job(list(prompts[(i + k) % len(prompts)]), params, group.emit(k)))
                group.ended.wait(1800)
                out.append(group.dones.get(0, ()))
        finally:
            engine.close()
    return out


def run_conditions(path: Path, draft: Path | None, prompts: list[list[int]], conditions: list[str],
                   max_tokens: int, gpu_layers: int = 0, mmproj: Path | None = None,
                   pictures: tuple[Image, ...] = (), exact_gpu: bool = False) -> dict[str, Any]:
    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    seeded = SamplingParams(temperature=0.8, seed=11, max_tokens=max_tokens)

    def config(drafter: str = "none", draft: Path | None = None) -> RuntimeConfig:
        return _config(path, drafter, draft, gpu_layers, mmproj, exact_gpu=exact_gpu)

    base = config()
    reference = _cold(base, prompts, greedy, pictures)
    reference_seeded = reference
    got: dict[str, list[tuple[int, ...]]] = {}
    report: dict[str, Any] = {"prompts": len(prompts), "conditions": {}}
    for c in conditions:
        log.info("condition %s", c)
        if c in ("ngram", "auto") or (c == "model" and draft is not None):
            got[c] = _cold(config(c, draft if c != "ngram" else None), prompts, greedy, pictures)
        elif c == "warm":
            with _open(base, pictures) as rt:
                got[c] = [(_reply(rt, p, greedy), _reply(rt, p, greedy))[1] for p in prompts]
        elif c == "memory":
            with _open(replace(base, state_cache_bytes=1 << 30), pictures) as rt:
                got[c] = []
                for i, p in enumerate(prompts):
                    _reply(rt, p, greedy)
                    _reply(rt, prompts[(i + 1) % len(prompts)], greedy)  # another conversation
                    got[c].append(_reply(rt, p, greedy))  # restored from memory
        elif c == "disk":
            with tempfile.TemporaryDirectory() as kv, mock.patch.dict("os.environ", {"DUET_KV_DIR": kv}):
                disk = replace(base, kv_store_bytes=1 << 31)
                with _open(disk, pictures) as rt:
                    for p in prompts:
                        _reply(rt, p, greedy)
                        rt.ctx.clear()
                with _open(disk, pictures) as rt:
                    got[c] = [_reply(rt, p, greedy) for p in prompts]
        elif c == "parallel":
            got[c] = _parallel(base, prompts, greedy, pictures)
        elif c == "batch64":
            got[c] = _cold(replace(base, context=replace(base.context, n_batch=64)), prompts, greedy, pictures)
        elif c == "seeded":
            plain = _cold(base, prompts, seeded, pictures)
            drafted = _cold(config("ngram"), prompts, seeded, pictures)
            got[c] = drafted
            reference_seeded = plain
        if c in got:  # (logged as it comes: a run cut short still says what it found)
            want = reference_seeded if c == "seeded" else reference
            parts = [next((i for i, (a, b) in enumerate(zip(r, w)) if a != b), min(len(r), len(w)))
                     for r, w in zip(got[c], want) if r != w]
            report["conditions"][c] = {"differ": len(parts), "first_difference_at": parts}
            log.info("%s: %d of %d replies differ %s", c, len(parts), len(prompts), parts)
    return report


def run(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    draft = resolve_model(args.draft) if args.draft else None
    texts = json.loads((RESOURCES / "open_prompts.json").read_text(encoding="utf-8"))[:args.prompts]
    pictures = tuple(picture(i) for i in range(args.image_prompts)) if args.mmproj else ()
    with _open(_config(path, gpu_layers=args.gpu_layers, mmproj=args.mmproj,
                       exact_gpu=args.exact_gpu), pictures) as rt:
        prompts = [chat_tokens(rt.target, [Message("system", SYSTEM), Message(
            "user", t, images=pictures[i:i + 1])]) for i, t in enumerate(texts)]
    conditions = [c for c in args.conditions.split(",") if c]
    report = run_conditions(path, draft, prompts, conditions, args.max_tokens, args.gpu_layers,
                            args.mmproj, pictures, args.exact_gpu)
    report["model"], report["gpu_layers"], report["image_prompts"] = path.name, args.gpu_layers, len(pictures)
    report["exact_gpu"] = args.exact_gpu
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"exact-{path.stem}.json"
    out.write_text(json.dumps(report, indent=1))
    total = sum(r["differ"] for r in report["conditions"].values())
    print(f"{path.name}, {len(prompts)} prompts ({len(pictures)} with a picture): "
          f"{total} differing replies")
    for c, r in report["conditions"].items():
        print(f"  {c:9s} {r['differ']:3d} differ" + (f" (first at tokens {r['first_difference_at']})"
                                                    if r["differ"] else ""))
    return 0
