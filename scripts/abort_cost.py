"""What a decode's stop check costs: one step with no check, with a Python callback (a plain
threading.Event as its cancel), and with the library reading a flag (engine.llama.abort.Cancel),
each alone and beside another Python thread that keeps the interpreter busy (as the local server
reading a request, or the window preparing a prompt, does for tens of milliseconds); then how
soon a pass of reading ahead's size stops once its stop is set.

    .venv/bin/python scripts/abort_cost.py target

Medians of a run of single-token steps after 128 cells, each rewound, in turns, three rounds.
engine/llama/abort.py quotes the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from step_time import step_ms  # (this folder is first on the path)

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def busy(on: bool) -> Iterator[None]:
    """While the block runs (``on``), another thread runs pure Python: the interpreter's lock is
    held but for its switches."""
    if not on:
        yield
        return
    stop = threading.Event()

    def spin() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        yield
    finally:
        stop.set()
        spinner.join()


def stop_lags(ctx: Any, depth: int, make: Callable[[], threading.Event], n: int, size: int,
              rng: random.Random) -> list[float]:
    """``n`` reads of ``size`` tokens on another thread, each stop set at a random moment inside
    it (10-90% of a whole read's time): ms from the set to the pass's end."""
    from engine.errors import DecodeError

    chunk = [300 + i for i in range(size)]
    t = time.perf_counter()
    ctx.decode(chunk, logits="none")  # how long a whole read takes: each stop falls inside one
    whole = time.perf_counter() - t
    ctx.rewind(depth)
    lags = []
    for _ in range(n):
        cancel, ended = make(), list[float]()

        def read(cancel: threading.Event = cancel, ended: list[float] = ended) -> None:
            with contextlib.suppress(DecodeError):
                ctx.decode(chunk, logits="none", cancel=cancel)
            ended.append(time.perf_counter())

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(rng.uniform(0.1, 0.9) * whole)
        t = time.perf_counter()
        cancel.set()
        reader.join()
        if ended[0] > t:  # (a pass that ended before the set is not a stop)
            lags.append((ended[0] - t) * 1000)
        ctx.rewind(depth)
    return lags


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a GGUF path or a starter key")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--stops", type=int, default=12, help="passes stopped midway, each way")
    args = p.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from engine.llama import abort
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.model import Model
    from engine.runtime.ahead import STEP
    from engine.runtime.runtime import resolve_model

    if abort.NATIVE is None:
        print("this llama.cpp build has no ggml_abort_on_flag (built as released): the flag's "
              "rows fall back to the Python callback")
    kinds: dict[str, Callable[[], Any]] = {"no check": lambda: None,
                                           "Python callback": threading.Event, "flag": abort.Cancel}
    with Model(resolve_model(args.model)) as model, LlamaSequence(model, ContextParams(n_ctx=1024)) as ctx:
        ctx.decode([model.bos if model.bos >= 0 else 1] + [100 + i for i in range(127)],
                   logits="none")
        depth = len(ctx.tokens)
        for r in range(args.rounds):
            row = []
            for on in (False, True):
                with busy(on):
                    row += [f"{name} {step_ms(ctx, args.steps, make()):.1f}"
                            for name, make in kinds.items()]
            print(f"round {r + 1}, ms a step: alone: {', '.join(row[:3])}; "
                  f"beside a busy thread: {', '.join(row[3:])}", flush=True)
        rng = random.Random(0)
        for (name, make), on in itertools.product(list(kinds.items())[1:], (False, True)):
            with busy(on):
                lags = stop_lags(ctx, depth, make, args.stops, STEP, rng)
            print(f"stop of a {STEP}-token read, {name}{', beside a busy thread' if on else ''}: "
                  f"median {statistics.median(lags):.1f} ms, at most {max(lags):.1f} ms "
                  f"({len(lags)} stops)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
