"""What a row of logits costs: one llama_decode of n tokens with logits for all of them against
the last only, on the target starter model at a 500-token context (medians of ``--rounds``).

``.venv/bin/python scripts/logits_cost.py`` on a quiet machine. The difference is the output
layer (n_vocab × n_embd) for each extra row: why tokens a grammar forces are decoded without
logits (engine.decode.decoding).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sizes", default="1,2,4,8")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.model import Model, ModelSpec
    from engine.runtime.runtime import resolve_model

    sizes = [int(n) for n in args.sizes.split(",")]
    with Model(ModelSpec(resolve_model("target"))) as model, \
            LlamaSequence(model, ContextParams(n_ctx=2048)) as ctx:
        ctx.decode(list(range(1000, 1500)), logits="last")
        times: dict[tuple[int, str], list[float]] = {}
        for _ in range(args.rounds):
            for n in sizes:
                for logits in ("all", "last"):
                    t = time.perf_counter()
                    ctx.decode(list(range(2000, 2000 + n)), logits=logits)  # type: ignore[arg-type]
                    times.setdefault((n, logits), []).append(time.perf_counter() - t)
                    ctx.rewind(500)
    print("| tokens in the pass | logits for all (ms) | for the last only (ms) |\n|---|---|---|")
    for n in sizes:
        print(f"| {n} | {1000 * statistics.median(times[n, 'all']):.1f} "
              f"| {1000 * statistics.median(times[n, 'last']):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
