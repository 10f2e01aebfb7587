"""The verify-cost curve of each model given: what one pass over n tokens (all logits, as a
verification) costs, in ms and in single steps, as Duet's own calibration measures it
(engine.decode.speculative.calibration.measure_cost) at the drafter's context depth.

    .venv/bin/python scripts/verify_curve.py target draft --gpu-layers -1

The step ratio of a draft and its target is the draft model's cost per drafted token; the curve's
flatness is what makes long drafts pay (a GPU) or not (a 2-core CPU: 16 tokens cost ~9 steps).
Each curve is also printed as ``--cost`` for scripts/simulate_spec.py, which replays recorded
traces of the real models against it. ``--lib DIR`` measures another build of the libraries
(``--inexact`` with a build as released, for docs/benchmarks/exact.md's comparisons).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="GGUF paths or starter keys")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers offloaded to the GPU (-1: all)")
    p.add_argument("--sizes", default="", help="comma-separated (default: the drafter's calibration sizes)")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--inexact", action="store_true",
                   help="exact decoding off: repacked weights, llama.cpp's own kernel choices")
    p.add_argument("--lib", type=Path, help="the llama.cpp build to time: a folder with its "
                   "libllama.so and libggml*.so (default: the one installed in the venv)")
    args = p.parse_args(argv)
    if args.lib:
        os.environ["LLAMA_CPP_LIB_PATH"] = str(args.lib.resolve())
    sys.path.insert(0, str(REPO))
    from engine.decode.speculative.calibration import measure_cost
    from engine.decode.speculative.tuning import TUNING
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.exactness import patched_kernels
    from engine.llama.model import Model, ModelSpec, for_decoding
    from engine.runtime.runtime import resolve_model

    print(f"{'patched' if patched_kernels() else 'released'} build {args.lib or 'installed'}"
          f"{', released kernels' if args.inexact else ', exact'}\n")
    sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else list(TUNING.calibration_sizes)
    steps: dict[str, float] = {}
    costs: list[str] = []  # for scripts/simulate_spec.py
    print(f"| model | {' | '.join(f'{n} tokens' for n in sizes)} |\n|---|{'---|' * len(sizes)}")
    for name in args.models:
        path = resolve_model(name)
        with Model(for_decoding(ModelSpec(path, n_gpu_layers=args.gpu_layers), not args.inexact)) as model, \
                LlamaSequence(model, ContextParams(n_ctx=args.ctx, exact=not args.inexact)) as ctx:
            cost = measure_cost(ctx, sizes)
        one = cost.verify_cost(1)
        steps[path.name] = one
        cells = [f"{1000 * s:.2f} ms ({s / one:.1f})" for _, s in cost.verify_s]
        print(f"| {path.name} | {' | '.join(cells)} |")
        costs.append(f"{path.name}: --cost " + ",".join(f"{n}:{s:.6f}" for n, s in cost.verify_s))
    print("\n" + "\n".join(costs))
    if len(steps) > 1:
        first = next(iter(steps.values()))
        print("\nstep cost relative to the first model: "
              + ", ".join(f"{k} {v / first:.2f}" for k, v in steps.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
