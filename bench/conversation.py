"""``python -m bench conversation``: branch switches and chats longer than the context.

Two measurements, each against its own baseline in the same run (medians over ``--repeats``):

* **switch**: a conversation of about ``--tokens`` tokens (text, not generated) whose last reply
  has two versions; the other version was live before this one (as after a regenerate). Time to
  the first token of the next reply after switching to the other version on the app's path (the
  generator with a ``StateCache``: the other version's saved state is restored), against an
  unedited turn (the same question after the version already cached), against a rewind to the
  fork point and a re-prefill of the other version (no cache: the path before the cache), and
  against a cold re-prefill. Target: switch ≤ 1.5 × unedited.
* **overflow**: a chat three times longer than ``--overflow-ctx`` answered turn by turn (greedy,
  ``--reply-tokens`` per reply). Time to the first token of each turn that had to drop the
  oldest turns (the cache is shifted), against the turns before the context filled, and
  against the same overflowing turns with the shift disabled (a re-prefill of what is kept).
  Target: overflow ≤ 2 × normal.

Prints a table and writes ``OUT/conversation.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.timing import time_stream
from engine.cache.state_cache import DEFAULT_CACHE_BYTES, StateCache
from engine.chat.fit import chat_tokens, fit_messages
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.events import Token
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model
from engine.runtime.generate import Generator
from engine.runtime.runtime import resolve_model

if TYPE_CHECKING:
    from engine.decode.sampling import SamplingParams
    from engine.llama.model import Model
    from engine.runtime.generate import Generator

log = logging.getLogger(__name__)

TOPICS = ("the sea", "mountains", "rivers", "deserts", "forests", "cities", "islands", "caves",
          "glaciers", "volcanoes", "lakes", "plains", "storms", "bridges", "gardens", "roads")
TARGETS = {"switch_ratio": 1.5, "overflow_ratio": 2.0}
OTHER_VERSION = (  # a second version of the last reply, a reply's usual length (> MIN_SAVE tokens)
    "A different answer: start with the closest one and go slowly. Spend the first morning on "
    "foot, with a map and water, and ask the people who live there what they would see first; "
    "they know which places are crowded at which hours and which paths are closed after rain. "
    "Keep the second day free for the place you liked best, and leave the farthest one for the "
    "end of the trip, when you know the roads and the weather. Write down what you saw each "
    "evening: it helps to choose the next day, and it is the best souvenir.")


def add_parser(bench_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = bench_subparsers.add_parser("conversation",
                                    help="branch switch and context overflow: time to first token")
    p.add_argument("--model", default="target", help="GGUF path or starter key (default: target)")
    p.add_argument("--ctx", type=int, default=4096, help="context size for the switch test")
    p.add_argument("--tokens", type=int, default=2000, help="conversation length before a switch")
    p.add_argument("--overflow-ctx", type=int, default=1024,
                   help="context size for the overflow test")
    p.add_argument("--reply-tokens", type=int, default=16, help="tokens per generated reply")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: one per core)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--parts", default="switch,overflow", help="what to measure: switch, overflow")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)
    return p


def _turn(i: int) -> tuple[str, str]:
    t = TOPICS[i % len(TOPICS)]
    return (f"Tell me about {t} (note {i}): what should a visitor know first?",
            f"About {t}: go early, bring water and a map, ask the people who live near {t}, "
            f"and leave every place as clean as you found it. Note {i} ends here.")


def _ttft(gen: Generator, prompt: list[int], params: SamplingParams) -> tuple[float, Any]:

    timing, events = time_stream(len(prompt), gen.complete(prompt, params),
                                 count=lambda e: isinstance(e, Token))
    return timing.ttft_s, events[-1]


def measure_switch(model: Model, args: argparse.Namespace) -> dict[str, Any]:

    params = SamplingParams(temperature=0, max_tokens=args.reply_tokens)
    msgs = [Message("system", "You are a helpful travel guide.", 0.0)]
    i = 0
    while len(chat_tokens(model, msgs)) < args.tokens:
        user, reply = _turn(i)
        msgs += [Message("user", user, 0.0), Message("assistant", reply, 0.0)]
        i += 1
    question = Message("user", "Which of these should I visit first?", 0.0)
    v1, v2 = msgs[-1], Message("assistant", OTHER_VERSION, 0.0)
    with_v1 = chat_tokens(model, msgs + [question])
    with_v2 = chat_tokens(model, msgs[:-1] + [v2, question])
    shown = [chat_tokens(model, msgs[:-1] + [v], add_generation_prompt=False) for v in (v2, v1)]
    cp = ContextParams(n_ctx=args.ctx, n_threads=args.threads)
    rows: dict[str, list[float]] = {"unedited": [], "switch": [], "rewind": [], "cold": []}
    cached: dict[str, list[int]] = {"switch": [], "rewind": []}
    cache = StateCache(DEFAULT_CACHE_BYTES)
    with LlamaSequence(model, cp) as ctx:
        # the app's path (the runtime's generator has a cache), then the path before the cache
        for row, gen in (("switch", Generator.alone(ctx, cache=cache)), ("rewind", Generator.alone(ctx))):
            for _ in range(args.repeats):
                ctx.clear()
                cache.clear()
                for tokens in shown:  # V2 was live, then V1 (with the cache, V2 is saved)
                    _ttft(gen, tokens, params)
                rows["unedited"].append(_ttft(gen, with_v1, params)[0])  # V1 already cached
                t, done = _ttft(gen, with_v2, params)  # switch back to V2, the same question
                rows[row].append(t)
                cached[row].append(done.stats.n_cached_tokens)
        for _ in range(args.repeats):
            ctx.clear()
            rows["cold"].append(_ttft(Generator.alone(ctx), with_v2, params)[0])
    med = {k: statistics.median(v) for k, v in rows.items()}
    s = cache.stats
    return {"prompt_tokens": len(with_v2), "cached_tokens_after_switch": min(cached["switch"]),
            "cached_tokens_after_rewind": min(cached["rewind"]), "ttft_s": med,
            "restore_s_mean": s.restore_s / s.restores if s.restores else None,
            "save_s_mean": s.save_s / s.saves if s.saves else None,
            "switch_ratio": med["switch"] / med["unedited"] if med["unedited"] else None,
            "rewind_ratio": med["rewind"] / med["unedited"] if med["unedited"] else None}


def measure_overflow(model: Model, args: argparse.Namespace, *, shift: bool) -> dict[str, Any]:

    params = SamplingParams(temperature=0, max_tokens=args.reply_tokens)
    cp = ContextParams(n_ctx=args.overflow_ctx, n_threads=args.threads)
    normal: list[float] = []
    overflow: list[float] = []
    recomputed: list[int] = []
    with LlamaSequence(model, cp) as ctx:
        if not shift:
            ctx.drop = lambda p0, p1: False  # type: ignore[method-assign]  # today's re-prefill
        gen = Generator.alone(ctx)
        msgs = [Message("system", "You are a helpful travel guide. Answer briefly.", 0.0)]
        i = 0
        while len(chat_tokens(model, msgs)) < 3 * args.overflow_ctx:
            msgs.append(Message("user", _turn(i)[0], 0.0))
            budget = ctx.n_ctx - min(params.max_tokens, ctx.n_ctx // 4)
            prompt, dropped = fit_messages(model, msgs, budget)
            t, done = _ttft(gen, prompt, params)
            (overflow if dropped else normal).append(t)
            if dropped:
                recomputed.append(done.stats.n_prompt_tokens - done.stats.n_cached_tokens)
            msgs.append(Message("assistant", _turn(i)[1], 0.0))  # fixed text: both runs alike
            i += 1
    return {"turns": i, "normal_ttft_s": statistics.median(normal) if normal else None,
            "overflow_ttft_s": statistics.median(overflow) if overflow else None,
            "overflow_turns": len(overflow),
            "recomputed_tokens_median": statistics.median(recomputed) if recomputed else None}


def run(args: argparse.Namespace) -> int:

    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    report: dict[str, Any] = {"model": str(args.model), "targets": TARGETS}
    args.out.mkdir(parents=True, exist_ok=True)

    def write() -> None:  # after each part, so a long run keeps what it measured
        (args.out / "conversation.json").write_text(json.dumps(report, indent=2), encoding="utf-8")

    with Model(resolve_model(args.model)) as model:
        if "switch" in parts:
            switch = report["switch"] = measure_switch(model, args)
            write()
            s = switch["ttft_s"]
            print(f"switch ({switch['prompt_tokens']} tokens): unedited {_ms(s['unedited'])}, "
                  f"switch (state restored, {switch['cached_tokens_after_switch']} reused) "
                  f"{_ms(s['switch'])}, rewind + re-prefill ({switch['cached_tokens_after_rewind']} "
                  f"reused) {_ms(s['rewind'])}, cold {_ms(s['cold'])}; ratio "
                  f"{switch['switch_ratio']:.2f} (target ≤ {TARGETS['switch_ratio']}; rewind "
                  f"{switch['rewind_ratio']:.2f}); a save {_ms(switch['save_s_mean'])}, a restore "
                  f"{_ms(switch['restore_s_mean'])}", flush=True)
        if "overflow" in parts:
            shifted = report["overflow_shift"] = measure_overflow(model, args, shift=True)
            refill = report["overflow_reprefill"] = measure_overflow(model, args, shift=False)
            ratio = report["overflow_ratio"] = (
                shifted["overflow_ttft_s"] / shifted["normal_ttft_s"]
                if shifted["overflow_ttft_s"] and shifted["normal_ttft_s"] else None)
            write()
            for name, r in (("shift", shifted), ("re-prefill", refill)):
                print(f"overflow with {name}: {r['turns']} turns, {r['overflow_turns']} overflowing; "
                      f"normal {_ms(r['normal_ttft_s'])}, overflowing {_ms(r['overflow_ttft_s'])}, "
                      f"recomputed {r['recomputed_tokens_median']} tokens (median)")
            if ratio is not None:
                print(f"overflow ratio {ratio:.2f} (target ≤ {TARGETS['overflow_ratio']})")
    return 0


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1e3:.0f} ms"
