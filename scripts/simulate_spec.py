"""Replay the n-gram speculator on recorded greedy traces, against a measured verify-cost curve.

Greedy verification accepts exactly the longest prefix of a draft that equals the plain output,
so a recorded plain run (prompt ids + output ids) tells what any n-gram policy would accept, and
policies can be compared without timing noise. The real figures come from ``python -m bench``.

    python scripts/simulate_spec.py --record TRACES.json --suite -1   # plain greedy runs, 1.5B
    python scripts/simulate_spec.py TRACES.json [--half held-out] [--cost 1:0.032,...]

``--suite N`` records the first N prompts of each category of the benchmark suite
(bench/suite.py; -1: all 54), a multi-turn prompt with its earlier turns, which the
replay runs through the same speculator first, as the bench does; without it, the shipped
prompts. ``--half`` replays the suite's tuning half (an even index within its category) or its
held-out half (odd): constants are set on the tuning half only. ``--set NAME=VALUE`` replays with
a constant of engine/decode/speculative/tuning.py changed, ``--resend`` replays each prompt sent a
second time (a regenerate: the first reply is remembered), ``--no-renames`` without the
tokenizer, and ``--code DIR`` replays the engine package of another checkout (e.g.
``git archive main engine | tar -x -C DIR``), for a before and after on the same traces.

Each line gives the speedup over plain decoding and, as ``oracle``, the best any length choice
could do with the same drafter's proposals (knowing how far each would be accepted). Per
category: the geometric mean; overall: the geometric mean of the categories' (as the bench).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported late: --code replays another checkout's engine
    from engine.decode.speculative.controller import CostModel
    from engine.decode.speculative.speculator import Speculation
    from engine.llama.model import Model

# Qwen2.5-Coder 1.5B Q4_K_M, 2 threads on this 2-core CPU, flash attention off, n tokens decoded
# (all logits) after a 512-token context, median of 7 interleaved repeats (seconds).
CPU = ("1:.0382,2:.0635,3:.0814,4:.1053,6:.1439,8:.2255,12:.2853,16:.2691,24:.4374,32:.5135,"
       "48:.6662,64:.8762")
HALVES = ("tuning", "held-out")


def half(prompt_id: str) -> str:
    """The suite's declared halves: an even index within the category (``rag-02-...``) tunes,
    an odd one is held out (docs/benchmarks/suite.md)."""
    return HALVES[int(prompt_id.split("-")[1]) % 2]


def use_code(folder: str) -> None:
    """Import ``engine`` from ``folder`` instead of this checkout (which is installed editable)."""
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, str(Path(folder).resolve()))


def speculator(cost: CostModel, vocab: Model | None, overrides: dict[str, str]) -> Speculation:
    """A fresh n-gram speculation, built as both this package and the one before issue 27 allow."""
    from engine.decode.speculative.ngram import NgramDrafter
    from engine.decode.speculative.params import SpeculativeParams
    from engine.decode.speculative.speculator import Speculation

    params = SpeculativeParams(drafter="ngram")
    if not overrides:
        return Speculation(params, cost, ngram=NgramDrafter(vocab=vocab))
    from dataclasses import fields, replace

    from engine.decode.speculative.tuning import TUNING

    kinds = {f.name: type(getattr(TUNING, f.name)) for f in fields(TUNING)}
    tuning = replace(TUNING, **{k: kinds[k](v) for k, v in overrides.items()})
    return Speculation(params, cost, ngram=NgramDrafter(vocab=vocab, tuning=tuning), tuning=tuning)


def replay(spec: Speculation, cost: CostModel, prompt: list[int], output: list[int]) -> dict:
    """One reply through ``spec`` as the generator runs it; its time from the cost curve."""
    from engine.decode.sampling import Sampler, SamplingParams

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
        spec.observe(draft, n, cost.verify_cost(k + 1))  # as the engine times every lone pass
        step = output[i:i + n + 1]
        history += step
        i += len(step)
    plain = cost.verify_cost(1) * len(output)
    return {"speedup": plain / t, "passes": passes, "proposed": proposed, "accepted": accepted}


def oracle(cost: CostModel, vocab: Model | None, prompt: list[int], output: list[int],
           draft_max: int = 64) -> float:
    """Speedup of the best draft lengths (calibrated batch sizes) for the drafter's proposals."""
    from engine.decode.speculative.ngram import NgramDrafter

    ngram = NgramDrafter(vocab=vocab)
    ngram.begin(prompt)
    right, offered = [0], [0]  # per position i >= 1: tokens of the proposal that hold, proposed
    for i in range(1, len(output)):
        d = ngram.propose(prompt + output[:i], draft_max)
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


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def record(path: str, model: str, max_tokens: int, suite: int = 0, threads: int = 0,
           categories: tuple[str, ...] = ()) -> None:
    """Plain greedy traces into ``path`` (rewritten after each prompt; the prompts it already
    holds are kept). With ``suite`` (N > 0: the first N of each category; -1: all), the
    benchmark suite's prompts (of ``categories``, all when empty), each multi-turn one as the
    bench runs it: its earlier turns' prompts and replies are kept under ``earlier``."""
    from bench.prompts import load_prompts
    from bench.suite import build_suite, select
    from engine.chat.fit import chat_tokens
    from engine.chat.messages import Message
    from engine.decode.sampling import SamplingParams
    from engine.decode.speculative.params import SpeculativeParams
    from engine.events import collect
    from engine.llama.context_params import ContextParams
    from engine.llama.model import ModelSpec
    from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model

    if suite:
        chosen = select(build_suite(), categories, per_category=max(0, suite))
        prompts = [(p.id, p.category, p.turns) for p in chosen]
    else:
        prompts = [(bp.id, bp.id, (bp.text,)) for bp in load_prompts()]
    sampling = SamplingParams(temperature=0, max_tokens=max_tokens)
    traces: dict[str, dict] = json.load(open(path)) if Path(path).exists() else {}
    config = RuntimeConfig(target=ModelSpec(resolve_model(model)),
                           context=ContextParams(n_ctx=4096, n_threads=threads),
                           sampling=sampling, speculative=SpeculativeParams(drafter="none"))
    with Runtime(config) as rt:
        target, ctx = rt.target, rt.ctx
        if target is None or ctx is None:
            raise SystemExit("the target did not load")
        for pid, category, turns in prompts:
            if pid in traces:
                continue
            messages: list[Message] = []
            earlier: list[list[list[int]]] = []
            for text in turns:
                messages.append(Message("user", text))
                prompt = chat_tokens(target, messages)
                ctx.clear()
                done = collect(rt.generator.complete(prompt, sampling))
                messages.append(Message("assistant", done.text))
                earlier.append([prompt, list(done.token_ids)])
            prompt, output = earlier.pop()
            traces[pid] = {"category": category, "prompt": prompt, "output": output, "earlier": earlier}
            print(f"{pid}: {len(prompt)} prompt tokens, {len(output)} generated", flush=True)
            with open(path, "w") as f:
                json.dump(traces, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces")
    ap.add_argument("--record", action="store_true", help="record plain greedy traces into TRACES")
    ap.add_argument("--model", default="target")
    ap.add_argument("--max-tokens", type=int, default=300)
    ap.add_argument("--suite", type=int, default=0, metavar="N",
                    help="record N prompts per category of the benchmark suite (-1: all)")
    ap.add_argument("--categories", default="", help="record only these suite categories (comma-separated)")
    ap.add_argument("--threads", type=int, default=0, help="threads when recording (0: one per core)")
    ap.add_argument("--cost", default=CPU)
    ap.add_argument("--decide-cost", default="", metavar="CURVE",
                    help="the curve the speculator chooses lengths by (default: --cost, which times the replay)")
    ap.add_argument("--half", choices=HALVES, help="replay only this half of the suite")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a constant of engine/decode/speculative/tuning.py, changed")
    ap.add_argument("--resend", action="store_true", help="replay each prompt sent a second time")
    ap.add_argument("--no-renames", action="store_true", help="without the tokenizer: no renames learned")
    ap.add_argument("--code", metavar="DIR", help="replay the engine package of another checkout")
    ap.add_argument("--oracle", action="store_true", help="also give each prompt's oracle")
    ap.add_argument("--json", metavar="OUT", help="write each prompt's speedup to OUT")
    args = ap.parse_args()
    if args.code:
        use_code(args.code)
    from engine import logsetup

    logsetup.configure()
    if args.record:
        record(args.traces, args.model, args.max_tokens, args.suite, args.threads,
               tuple(c for c in args.categories.split(",") if c))
        return
    from engine.decode.speculative.controller import CostModel
    from engine.llama.model import Model, ModelSpec
    from engine.runtime.runtime import resolve_model

    cost = CostModel(tuple((int(a), float(b)) for a, b in (p.split(":") for p in args.cost.split(","))))
    decide = CostModel(tuple((int(a), float(b)) for a, b in (p.split(":") for p in args.decide_cost.split(",")))) \
        if args.decide_cost else cost
    overrides = dict(s.split("=", 1) for s in args.set)
    vocab = None if args.no_renames else Model(ModelSpec(resolve_model(args.model), vocab_only=True))
    by_category: dict[str, list[float]] = {}
    speedups: dict[str, float] = {}
    for name, tr in json.load(open(args.traces)).items():
        if args.half and half(name) != args.half:
            continue
        spec = speculator(decide, vocab, overrides)
        for prompt, output in tr.get("earlier", []):
            replay(spec, cost, prompt, output)
        r = replay(spec, cost, tr["prompt"], tr["output"])
        if args.resend:
            r = replay(spec, cost, tr["prompt"], tr["output"])
        speedups[name] = r["speedup"]
        by_category.setdefault(tr["category"], []).append(r["speedup"])
        best = f"  oracle x{oracle(cost, vocab, tr['prompt'], tr['output']):.2f}" if args.oracle else ""
        print(f"{name:40s} x{r['speedup']:.3f}{best}  passes {r['passes']:4d}"
              f"  accepted {r['accepted']}/{r['proposed']}")
    means = {c: geomean(v) for c, v in by_category.items()}
    for category, values in by_category.items():
        print(f"{category:16s} geometric mean x{means[category]:.3f}  lowest x{min(values):.3f}")
    if means:
        print(f"{'overall':16s} x{geomean(list(means.values())):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"prompts": speedups, "categories": means}, f, indent=1)


if __name__ == "__main__":
    main()
