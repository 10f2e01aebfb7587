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

The report counts the replies that differ from the reference (the target: none) and where.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

from bench.prompts import RESOURCES
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.events import Done
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model
from engine.runtime.service import Engine, Job

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
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


def _config(path: Path, drafter: str = "none", draft: Path | None = None, gpu_layers: int = 0,
            **context: Any) -> RuntimeConfig:
    ctx = ContextParams(n_ctx=2048, **context)
    return RuntimeConfig(target=ModelSpec(path, n_gpu_layers=gpu_layers),
                         draft=ModelSpec(draft, n_gpu_layers=gpu_layers) if draft else None, context=ctx,
                         speculative=SpeculativeParams(drafter=drafter, adaptive=False),
                         kv_store_bytes=0)


def _reply(rt: Runtime, prompt: list[int], params: SamplingParams) -> tuple[int, ...]:
    done = [e for e in rt.generator.complete(prompt, params) if isinstance(e, Done)][-1]
    return done.token_ids


def _cold(config: RuntimeConfig, prompts: list[list[int]], params: SamplingParams) -> list[tuple[int, ...]]:
    out = []
    with Runtime(config) as rt:
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


def _parallel(config: RuntimeConfig, prompts: list[list[int]], params: SamplingParams) -> list[tuple[int, ...]]:
    """Each prompt answered in one batch with the next three (four sequences, started together)."""
    out: list[tuple[int, ...]] = []
    with Runtime(replace(config, context=replace(config.context, n_parallel=4, n_ctx=8192))) as rt:
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
                   max_tokens: int, gpu_layers: int = 0) -> dict[str, Any]:
    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    seeded = SamplingParams(temperature=0.8, seed=11, max_tokens=max_tokens)
    base = _config(path, gpu_layers=gpu_layers)
    reference = _cold(base, prompts, greedy)
    reference_seeded = reference
    got: dict[str, list[tuple[int, ...]]] = {}
    report: dict[str, Any] = {"prompts": len(prompts), "conditions": {}}
    for c in conditions:
        log.info("condition %s", c)
        if c in ("ngram", "auto") or (c == "model" and draft is not None):
            got[c] = _cold(_config(path, c, draft if c != "ngram" else None, gpu_layers), prompts, greedy)
        elif c == "warm":
            with Runtime(base) as rt:
                got[c] = [(_reply(rt, p, greedy), _reply(rt, p, greedy))[1] for p in prompts]
        elif c == "memory":
            with Runtime(replace(base, state_cache_bytes=1 << 30)) as rt:
                got[c] = []
                for i, p in enumerate(prompts):
                    _reply(rt, p, greedy)
                    _reply(rt, prompts[(i + 1) % len(prompts)], greedy)  # another conversation
                    got[c].append(_reply(rt, p, greedy))  # restored from memory
        elif c == "disk":
            with tempfile.TemporaryDirectory() as kv, mock.patch.dict("os.environ", {"DUET_KV_DIR": kv}):
                disk = replace(base, kv_store_bytes=1 << 31)
                with Runtime(disk) as rt:
                    for p in prompts:
                        _reply(rt, p, greedy)
                        rt.ctx.clear()
                with Runtime(disk) as rt:
                    got[c] = [_reply(rt, p, greedy) for p in prompts]
        elif c == "parallel":
            got[c] = _parallel(base, prompts, greedy)
        elif c == "batch64":
            got[c] = _cold(replace(base, context=replace(base.context, n_batch=64)), prompts, greedy)
        elif c == "seeded":
            plain = _cold(base, prompts, seeded)
            drafted = _cold(_config(path, "ngram", gpu_layers=gpu_layers), prompts, seeded)
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
    with Runtime(_config(path, gpu_layers=args.gpu_layers)) as rt:
        prompts = [chat_tokens(rt.target, [Message("system", SYSTEM), Message("user", t)]) for t in texts]
    conditions = [c for c in args.conditions.split(",") if c]
    report = run_conditions(path, draft, prompts, conditions, args.max_tokens, args.gpu_layers)
    report["model"], report["gpu_layers"] = path.name, args.gpu_layers
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"exact-{path.stem}.json"
    out.write_text(json.dumps(report, indent=1))
    total = sum(r["differ"] for r in report["conditions"].values())
    print(f"{path.name}, {len(prompts)} prompts: "
          f"{total} differing replies")
    for c, r in report["conditions"].items():
        print(f"  {c:9s} {r['differ']:3d} differ" + (f" (first at tokens {r['first_difference_at']})"
                                                    if r["differ"] else ""))
    return 0
