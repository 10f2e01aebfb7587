"""What one decode step costs after a given number of cells: the median of a run of single-token
steps, each read with its logits and then rewound, so every step sees the same cache. ``--rows
N`` times a pass of N tokens instead (a verify pass). The CPU time a step takes (all threads, the
mean) is printed too: on a machine other programs keep busy it drifts less than the wall clock.

    .venv/bin/python scripts/step_time.py target --depth 1000
    PYTHONPATH=/path/to/released .venv/bin/python scripts/step_time.py target --depth 1000 --inexact

The second line times llama.cpp as released (an unpatched build of the same sdist put first on
the path, exact decoding off): docs/benchmarks/exact.md compares the two, in turns. ``--lib DIR``
times another build of the libraries, e.g. both made for AVX2 alone:

    .venv/bin/python scripts/step_time.py target --depth 1000 --lib /tmp/avx2-exact/lib
    .venv/bin/python scripts/step_time.py target --depth 1000 --lib /tmp/avx2-released/lib --inexact
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def step_ms(ctx: Any, steps: int, cancel: threading.Event | None = None, rows: int = 1) -> float:
    """The median ms of ``steps`` steps of ``rows`` tokens of ``ctx`` (their logits read), each
    rewound, so every step sees the same cache; ``cancel``: the stop the decodes take."""
    depth = len(ctx.tokens)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        ctx.decode([200 + i for i in range(rows)], logits="all", cancel=cancel)
        ctx.logits_rows()
        times.append(time.perf_counter() - t0)
        ctx.rewind(depth)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a GGUF path or a starter key")
    p.add_argument("--depth", type=int, default=512, help="cells in the cache before each step")
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--rows", type=int, default=1, help="tokens a step reads (a verify pass: more)")
    p.add_argument("--inexact", action="store_true",
                   help="exact decoding off: repacked weights, llama.cpp's own kernel choices")
    p.add_argument("--lib", type=Path, help="the llama.cpp build to time: a folder with its "
                   "libllama.so and libggml*.so (default: the one installed in the venv)")
    args = p.parse_args(argv)
    if args.lib:
        os.environ["LLAMA_CPP_LIB_PATH"] = str(args.lib.resolve())

    sys.path.insert(0, str(REPO))
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.exactness import patched_kernels
    from engine.llama.model import Model, ModelSpec, for_decoding
    from engine.runtime.runtime import resolve_model

    spec = for_decoding(ModelSpec(resolve_model(args.model)), not args.inexact)
    params = ContextParams(n_ctx=max(2048, args.depth + args.rows + 64), exact=not args.inexact)
    with Model(spec) as model, LlamaSequence(model, params) as ctx:
        tokens = [model.bos if model.bos >= 0 else 1] + [100 + i for i in range(args.depth - 1)]
        for i in range(0, args.depth, 64):
            ctx.decode(tokens[i:i + 64])
        cpu0 = time.process_time()
        ms = step_ms(ctx, args.steps, rows=args.rows)
        cpu_ms = 1000 * (time.process_time() - cpu0) / args.steps
    mode = "released kernels" if args.inexact else "exact"
    build = f"{'patched' if patched_kernels() else 'released'} build {args.lib or 'installed'}"
    what = "one step" if args.rows == 1 else f"one pass of {args.rows} tokens"
    print(f"{spec.path.name}, {mode} ({build}), after {args.depth} cells: {what} {ms:.1f} ms "
          f"(median of {args.steps}), {cpu_ms:.1f} ms of CPU time (mean)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
