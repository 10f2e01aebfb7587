"""Replay speculative policies on recorded greedy traces, with a given verify-cost curve.

Greedy verification accepts exactly the longest prefix of a draft that equals the plain output,
so a recorded plain run (prompt ids + output ids) tells what any n-gram policy would accept.
This is for tuning the controller quickly; the real figures come from ``duet-cli bench``.

    python scripts/simulate_spec.py --record TRACES.json [--model target] [--suite 2]   # plain greedy runs
    python scripts/simulate_spec.py TRACES.json [--cost 1:0.032,4:0.085,...] [--no-ledger]

``--suite N`` records N prompts per category of the benchmark suite (engine/bench/suite.py; the
first turn of multi-turn ones) instead of the shipped prompts; the summary then gives each
category's geometric mean. ``--no-ledger`` replays without the payoff ledger
(engine/speculative/payoff.py), to compare.

Each line gives the policy's speedup and, as ``oracle``, the best any length choice could do with
the same drafter's proposals (knowing how far each would be accepted): the gap is what a better
length policy could still win; the oracle itself, what a better drafter would have to beat.
"""

from __future__ import annotations

import argparse
import json
import math

from engine import logsetup
from engine.sampling import Sampler, SamplingParams
from engine.speculative.controller import CostModel
from engine.speculative.ngram import NgramDrafter, NgramParams
from engine.speculative.params import SpeculativeParams
from engine.speculative.speculator import Speculator
from engine.speculative.styles import Vocab

# Qwen2.5-Coder 1.5B Q4_K_M, 2 threads on this 2-core CPU, flash attention off, n tokens decoded
# (all logits) after a 512-token context, median of 7 interleaved repeats (seconds).
CPU = ("1:.0382,2:.0635,3:.0814,4:.1053,6:.1439,8:.2255,12:.2853,16:.2691,24:.4374,32:.5135,"
       "48:.6662,64:.8762")


def simulate(prompt: list[int], output: list[int], cost: CostModel, params: SpeculativeParams,
             vocab: Vocab | None = None) -> dict:
    ngram = NgramDrafter(NgramParams(params.ngram_min, params.ngram_max), vocab)
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


def oracle(prompt: list[int], output: list[int], cost: CostModel, params: SpeculativeParams,
           vocab: Vocab | None = None) -> float:
    """Speedup of the best draft lengths (calibrated batch sizes) for the drafter's proposals."""
    ngram = NgramDrafter(NgramParams(params.ngram_min, params.ngram_max), vocab)
    ngram.begin(prompt)
    right, offered = [0], [0]  # per position i >= 1: tokens of the proposal that hold, proposed
    for i in range(1, len(output)):
        d = ngram.propose(prompt + output[:i], params.draft_max)
        n = 0
        while n < len(d.tokens) and i + n < len(output) and d.tokens[n] == output[i + n]:
            n += 1
        right.append(n)
        offered.append(len(d.tokens))
    sizes = [s for s, _ in cost.verify_s if s >= 2]
    best = [0.0] * (len(output) + 1)  # best[i]: least time to emit output[i:] from position i
    for i in range(len(output) - 1, 0, -1):
        b = cost.verify_cost(1) + best[i + 1]
        for s in sizes:
            if s - 1 <= offered[i]:
                b = min(b, cost.verify_cost(s) + best[min(len(output), i + min(s - 1, right[i]) + 1)])
        best[i] = b
    return cost.verify_cost(1) * (len(output) - 1) / best[1] if len(output) > 1 else 1.0


def record(path: str, model: str, max_tokens: int, suite: int = 0) -> None:
    from engine.bench.prompts import load_prompts
    from engine.bench.timing import time_duet
    from engine.chat import Message
    from engine.context import ContextParams
    from engine.model import ModelSpec
    from engine.prompt import chat_tokens
    from engine.runtime import Runtime, RuntimeConfig, resolve_model

    if suite:
        from engine.bench.suite import build_suite, select

        prompts = [(p.id, p.category, p.text) for p in select(build_suite(), per_category=suite)]
    else:
        prompts = [(bp.id, bp.id, bp.text) for bp in load_prompts()]
    sampling = SamplingParams(temperature=0, max_tokens=max_tokens)
    traces = {}
    with Runtime(RuntimeConfig(target=ModelSpec(resolve_model(model)), context=ContextParams(n_ctx=4096),
                               sampling=sampling, speculative=SpeculativeParams(drafter="none"))) as rt:
        for pid, category, text in prompts:
            prompt = chat_tokens(rt.target, [Message("user", text)])
            _, done = time_duet(rt, prompt, sampling)
            traces[pid] = {"category": category, "prompt": prompt, "output": list(done.token_ids)}
            print(f"{pid}: {len(prompt)} prompt tokens, {len(done.token_ids)} generated")
    with open(path, "w") as f:
        json.dump(traces, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces")
    ap.add_argument("--record", action="store_true", help="record plain greedy traces into TRACES")
    ap.add_argument("--model", default="target")
    ap.add_argument("--max-tokens", type=int, default=300)
    ap.add_argument("--cost", default=CPU)
    ap.add_argument("--draft-max", type=int, default=SpeculativeParams().draft_max)
    ap.add_argument("--suite", type=int, default=0, metavar="N",
                    help="record N prompts per category of the benchmark suite")
    ap.add_argument("--no-ledger", action="store_true", help="replay without the payoff ledger")
    ap.add_argument("--no-styles", action="store_true",
                    help="without the model's tokenizer (no learned styles or renames)")
    args = ap.parse_args()
    logsetup.configure()
    if args.record:
        record(args.traces, args.model, args.max_tokens, args.suite)
        return
    if args.no_ledger:
        from engine.speculative.payoff import PayoffLedger

        PayoffLedger.allows = lambda self: True
    cost = CostModel(tuple((int(a), float(b)) for a, b in (p.split(":") for p in args.cost.split(","))))
    params = SpeculativeParams(drafter="ngram", draft_max=args.draft_max)
    vocab = None
    if not args.no_styles:
        from engine.model import Model, ModelSpec
        from engine.runtime import resolve_model

        vocab = Model(ModelSpec(resolve_model(args.model), vocab_only=True))
    by_category: dict[str, list[float]] = {}
    for name, tr in json.load(open(args.traces)).items():
        r = simulate(tr["prompt"], tr["output"], cost, params, vocab)
        best = oracle(tr["prompt"], tr["output"], cost, params, vocab)
        by_category.setdefault(tr.get("category", name), []).append(r["speedup"])
        print(f"{name:16s} x{r['speedup']:.2f}  oracle x{best:.2f}  passes {r['passes']:4d}"
              f"  tok/pass {r['tokens_per_pass']:.2f}  accepted {r['accepted']}/{r['proposed']}")
    for category, values in by_category.items():
        if len(values) > 1:
            gmean = math.exp(sum(map(math.log, values)) / len(values))
            print(f"{category:16s} geometric mean x{gmean:.3f}  lowest x{min(values):.3f}")

if __name__ == "__main__":
    main()
