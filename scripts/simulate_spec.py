"""Replay speculative policies on recorded greedy traces, with a given verify-cost curve.

Greedy verification accepts exactly the longest prefix of a draft that equals the plain output,
so a recorded plain run (prompt ids + output ids) tells what any n-gram policy would accept.
This is for tuning the controller quickly; the real figures come from ``duet-cli bench``.

    python scripts/simulate_spec.py TRACES.json [--cost 1:0.032,4:0.085,...]
"""

from __future__ import annotations

import argparse
import json

from engine.sampling import Sampler, SamplingParams
from engine.spec.controller import CostModel
from engine.spec.ngram import NgramDrafter, NgramParams
from engine.spec.params import SpeculativeParams
from engine.spec.speculator import Speculator

# Qwen2.5-Coder 1.5B Q4_K_M, 2 threads on this 2-core CPU, flash attention off (seconds).
CPU = ("1:.0357,2:.0607,3:.0789,4:.0954,6:.1326,8:.2144,12:.2647,16:.2473,24:.3752,32:.4141,"
       "48:.593,64:.8001")


def simulate(prompt: list[int], output: list[int], cost: CostModel, params: SpeculativeParams) -> dict:
    ngram = NgramDrafter(NgramParams(params.ngram_min, params.ngram_max))
    spec = Speculator(params, cost, ngram=ngram)
    sampler = Sampler(SamplingParams(temperature=0))
    spec.begin(prompt)
    history = prompt + output[:1]
    i, t, passes, proposed, accepted = 1, cost.verify_cost(1), 1, 0, 0
    while i < len(output):
        draft = spec.plan(history, len(output) - i - 1, sampler)
        k = len(draft.tokens)
        n = 0
        while n < k and draft.tokens[n] == output[i + n]:
            n += 1
        t += cost.verify_cost(k + 1)
        passes += 1
        proposed += k
        accepted += n
        if k:
            spec.observe(draft, n, 0.0)
        step = output[i:i + n + 1]
        history += step
        i += len(step)
    plain = cost.verify_cost(1) * len(output)
    return {"speedup": plain / t, "passes": passes, "proposed": proposed, "accepted": accepted,
            "tokens_per_pass": len(output) / passes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces")
    ap.add_argument("--cost", default=CPU)
    ap.add_argument("--draft-max", type=int, default=SpeculativeParams().draft_max)
    args = ap.parse_args()
    cost = CostModel(tuple((int(a), float(b)) for a, b in (p.split(":") for p in args.cost.split(","))))
    params = SpeculativeParams(drafter="ngram", draft_max=args.draft_max)
    for name, tr in json.load(open(args.traces)).items():
        r = simulate(tr["prompt"], tr["output"], cost, params)
        print(f"{name:16s} x{r['speedup']:.2f}  passes {r['passes']:4d}  tok/pass {r['tokens_per_pass']:.2f}"
              f"  accepted {r['accepted']}/{r['proposed']}")


if __name__ == "__main__":
    main()
