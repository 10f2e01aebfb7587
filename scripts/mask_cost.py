"""What constraining costs per token: llguidance's work for each token of the structured bench's
extraction (bench.structured's schema, the reply greedy decoding gives) on the target
starter model's 151,936-token vocabulary, against one decode step of the model (as the drafter's calibration times it).

``.venv/bin/python scripts/mask_cost.py`` on a quiet machine. Per token, the work the decoding
loop asks of the grammar (engine.decode.decoding, engine.decode.sampling): the tokens it forces from there
(``Matcher.forced``, which checks each one's mask), the full next-token mask (the sampler needs
it when the model's own first choice is refused; an upper bound), and taking the token. Prints
the median and 99th percentile in microseconds, and the median as a share of a decode step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# duet-plain's extraction reply (docs/benchmarks/structured.md), the text the tokens are taken from
REPLY = ('{"functions": [{"name": "rgb_to_yiq", "parameters": ["r", "g", "b"], "summary": "Converts '
         'RGB values to YIQ values."}, {"name": "yiq_to_rgb", "parameters": ["y", "i", "q"], "summary": '
         '"Converts YIQ values to RGB values."}, {"name": "rgb_to_hls", "parameters": ["r", "g", "b"], '
         '"summary": "Converts RGB values to HLS values."}]}')


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5, help="walks through the reply")
    p.add_argument("--model", default="target", help="GGUF path or starter key (the same vocabulary)")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers of the step's model on the GPU (-1: all)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from bench.structured import SCHEMA
    from engine.decode.constraint import Grammar
    from engine.decode.speculative.calibration import measure_cost
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams
    from engine.llama.model import Model, ModelSpec
    from engine.runtime.runtime import resolve_model

    with Model(ModelSpec(resolve_model(args.model), n_gpu_layers=args.gpu_layers)) as model:
        grammar = Grammar.compile(model, "json_schema", SCHEMA)
        grammar.matcher()  # llguidance's view of the vocabulary, built once per model
        per_token: list[float] = []
        for _ in range(args.rounds):
            m, rest = grammar.matcher(), REPLY.encode()
            while rest:
                t = time.perf_counter()
                forced = m.forced()
                m.mask()
                per_token.append(time.perf_counter() - t)
                # the forced run, or the next token of the reply's text as the tokenizer cuts it
                taken = forced or model.tokenize(rest.decode(), add_special=False)[:1]
                for token in taken:
                    if not m.allows(token):
                        raise SystemExit(f"the schema refuses {model.piece(token)!r}")
                    m.advance(token)
                    piece = model.piece(token)
                    if not rest.startswith(piece):
                        raise SystemExit(f"{piece!r} is not the reply's text")
                    rest = rest[len(piece):]
        with LlamaSequence(model, ContextParams(n_ctx=2048)) as ctx:
            step = measure_cost(ctx, (1,)).verify_cost(1)  # the drafter's own step measurement
    med, p99 = statistics.median(per_token), statistics.quantiles(per_token, n=100)[98]
    print(f"{len(per_token)} grammar steps: median {med * 1e6:.0f} µs, p99 {p99 * 1e6:.0f} µs; "
          f"one decode step {step * 1e3:.1f} ms: the median is {100 * med / step:.2f}% of it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
