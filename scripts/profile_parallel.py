"""Where the time of several replies at once goes: llama.cpp's decode, or the Python around it.

``.venv/bin/python scripts/profile_parallel.py [--jobs 1,4] [--max-tokens 128]`` runs N short
chat prompts at once on one in-process ``Engine`` (the target starter model, greedy, no drafting;
no HTTP), after one warm-up round, and prints the wall time, the time inside ``decode_batch``
and the rest. ``--suite`` takes the prompts of ``python -m bench parallel`` instead (about 450
tokens each, so reading them is most of the time); ``--flash-attn on|off`` overrides the
context's choice. ``--prefill`` also times reading a 1,024-token prompt in slices of 64 to 512
tokens. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROMPTS = ("Write a Python function that merges two sorted lists.", "Explain what a mutex is.",
           "Write a haiku about the sea.", "List five uses of a hash map.",
           "What is a closure in JavaScript?", "Describe TCP slow start.",
           "Write SQL to find duplicate emails.", "What does git rebase do?")


def jobs_at_once(n: int, max_tokens: int, prompts: tuple[str, ...] = PROMPTS,
                 flash_attn: bool | None = None) -> str:
    import engine.decode.scheduler as scheduler
    from engine.chat.fit import chat_tokens
    from engine.chat.messages import Message
    from engine.decode.sampling import SamplingParams
    from engine.events import Done
    from engine.llama.context_params import ContextParams
    from engine.llama.model import ModelSpec
    from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model
    from engine.runtime.service import Engine, Job

    runtime = Runtime(RuntimeConfig(ModelSpec(resolve_model("target")),
                                    context=ContextParams(n_ctx=2048, n_parallel=n,
                                                          flash_attn=flash_attn)))
    engine = Engine(runtime)
    inside = [0.0]
    decode = scheduler.decode_batch

    def timed(parts: Any) -> Any:
        t = time.perf_counter()
        rows = decode(parts)
        inside[0] += time.perf_counter() - t
        return rows

    scheduler.decode_batch = timed  # the scheduler looks it up at each step

    def round_(texts: tuple[str, ...]) -> tuple[float, int]:
        ended: list[object] = []
        all_done = threading.Event()

        def emit(event: object) -> None:
            if isinstance(event, (Done, Exception)):
                ended.append(event)
                if len(ended) == n:
                    all_done.set()
        t0 = time.perf_counter()
        for text in texts:
            engine.submit(Job(chat_tokens(runtime.target, [Message("user", text)]),
                              SamplingParams(temperature=0.0, max_tokens=max_tokens), emit))
        all_done.wait()
        return time.perf_counter() - t0, sum(e.stats.n_tokens for e in ended if isinstance(e, Done))

    try:
        round_(("Hi",) * n)  # warm-up (other prompts: the measured ones are read in the round)
        inside[0] = 0.0
        wall, tokens = round_(prompts[:n])
    finally:
        scheduler.decode_batch = decode
        engine.close()
    return (f"{n} at once: wall {wall:.2f} s, {tokens} tokens, {tokens / wall:.2f} tok/s; "
            f"decode {inside[0]:.2f} s, the rest {wall - inside[0]:.2f} s")


def prefill_slices() -> list[str]:
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.model import Model
    from engine.runtime.runtime import resolve_model

    out = []
    with Model(resolve_model("target")) as model, LlamaSequence(model, ContextParams(n_ctx=2048)) as ctx:
        tokens = model.tokenize_text((REPO / "engine" / "decode" / "scheduler.py").read_text())[:1024]
        for size in (64, 128, 256, 512):
            ctx.clear()
            t = time.perf_counter()
            for lo in range(0, len(tokens), size):
                last = lo + size >= len(tokens)
                ctx.decode(tokens[lo:lo + size], logits="last" if last else "none")
            took = time.perf_counter() - t
            out.append(f"prefill {len(tokens)} tokens in slices of {size}: {took:.2f} s, "
                       f"{len(tokens) / took:.1f} tok/s")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--jobs", default="1,4", help="comma-separated numbers of replies at once")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prefill", action="store_true", help="also time prompt slices")
    p.add_argument("--suite", action="store_true", help="the prompts of bench parallel")
    p.add_argument("--flash-attn", choices=("on", "off"), default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    prompts = PROMPTS
    if args.suite:
        from bench.prompts import load_prompts

        prompts = tuple(p.text for p in load_prompts())
    fa = None if args.flash_attn is None else args.flash_attn == "on"
    for n in (int(x) for x in args.jobs.split(",")):
        print(jobs_at_once(n, args.max_tokens, prompts, fa), flush=True)
    if args.prefill:
        for line in prefill_slices():
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
