"""``duet-cli bench speculative``: every drafting mode on the shipped prompt set, greedy, one run.

Modes: plain, ngram, model, auto (Duet), lookup (llama-cpp-python's LlamaPromptLookupDecoding),
and, given ``--llama-server PATH``, llama.cpp's own server in its n-gram and draft modes.
For each prompt and mode: tokens/s (generation only), speedup against plain measured in the
same run, acceptance, tokens per target pass, and whether the tokens equal plain decoding
(else the first differing index and the target's top-2 logit margin there).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from engine.bench.prompts import load_prompts
from engine.bench.report import chart, markdown_table
from engine.bench.timing import median, time_duet, time_llama
from engine.chat import Message
from engine.context import ContextParams
from engine.model import ModelSpec
from engine.prompt import chat_tokens
from engine.runtime import Runtime, RuntimeConfig, resolve_model
from engine.sampling import SamplingParams
from engine.speculative.params import SpeculativeParams

log = logging.getLogger(__name__)

DUET_MODES = ("plain", "ngram", "model", "auto")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("speculative", help="drafting modes and peers on the prompt set")
    p.add_argument("--model", default="target")
    p.add_argument("--draft", default="draft")
    p.add_argument("--modes", default="plain,ngram,model,auto,lookup",
                   help="comma-separated: plain,ngram,model,auto,lookup")
    p.add_argument("--prompts", default="", help="comma-separated prompt ids (default: all)")
    p.add_argument("--max-tokens", type=int, default=300)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--draft-max", type=int, default=SpeculativeParams().draft_max)
    p.add_argument("--llama-server", type=Path, default=None, help="llama-server binary to compare")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target, draft = resolve_model(args.model), resolve_model(args.draft)
    modes = [m for m in args.modes.split(",") if m]
    prompts = load_prompts(ids=tuple(x for x in args.prompts.split(",") if x))
    ctx = ContextParams(n_ctx=args.ctx, n_threads=args.threads)
    sampling = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    runtimes = {m: _runtime(m, target, draft, ctx, sampling, args.draft_max)
                for m in modes if m in DUET_MODES}
    if "plain" not in runtimes:
        runtimes["plain"] = _runtime("plain", target, draft, ctx, sampling, args.draft_max)
    lookup = _lookup_llm(target, ctx) if "lookup" in modes else None
    rows = []
    try:
        for bp in prompts:
            messages = [Message("user", bp.text)]
            prompt = chat_tokens(runtimes["plain"].target, messages)
            per_mode: dict[str, list[dict]] = {}
            for _ in range(args.repeats):
                for mode in modes:
                    if mode == "lookup":
                        per_mode.setdefault(mode, []).append(_run_lookup(lookup, prompt, args.max_tokens))
                    else:
                        per_mode.setdefault(mode, []).append(_run_duet(runtimes[mode], prompt, sampling))
            if args.llama_server:
                from engine.bench.server import run_server_modes

                per_mode.update(run_server_modes(args.llama_server, target, draft, bp.text,
                                                 args.max_tokens, ctx.threads(), args.repeats))
            plain_tps = median(r["tokens_per_s"] for r in per_mode["plain"])
            server_tps = median(r["tokens_per_s"] for r in per_mode.get("server-plain", []))
            plain_ids = per_mode["plain"][-1]["token_ids"]
            for mode, runs in per_mode.items():
                last = runs[-1]
                row = {"prompt": bp.id, "kind": bp.kind, "mode": mode,
                       "tokens_per_s": median(r["tokens_per_s"] for r in runs),
                       "n_tokens": last["n_tokens"], "acceptance": last.get("acceptance"),
                       "tokens_per_pass": last.get("tokens_per_pass"),
                       "drafters_used": last.get("drafters_used")}
                base = server_tps if mode.startswith("server-") else plain_tps  # each against its own plain
                row["speedup"] = row["tokens_per_s"] / base if base else 0.0
                row.update(_compare(runtimes["plain"], prompt, plain_ids, last))
                rows.append(row)
                log.info("%s %s: %.1f tok/s (x%.2f)", bp.id, mode, row["tokens_per_s"], row["speedup"])
    finally:
        for rt in runtimes.values():
            rt.close()
    report = {"model": str(target), "draft": str(draft), "threads": ctx.threads(),
              "max_tokens": args.max_tokens, "repeats": args.repeats, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "speculative.json").write_text(json.dumps(report, indent=2))
    md = markdown_table(report)
    (args.out / "speculative.md").write_text(md)
    chart(report, args.out / "speculative.png")
    print(md)
    return 0


def _runtime(mode: str, target: Path, draft: Path, ctx: ContextParams, sampling: SamplingParams,
             draft_max: int) -> Runtime:
    drafter = {"plain": "none"}.get(mode, mode)
    cfg = RuntimeConfig(target=ModelSpec(target), context=ctx, sampling=sampling,
                        draft=ModelSpec(draft) if mode in ("model", "auto") else None,
                        speculative=SpeculativeParams(drafter=drafter, draft_max=draft_max))
    return Runtime(cfg)


def _run_duet(rt: Runtime, prompt: list[int], sampling: SamplingParams) -> dict:
    timing, done = time_duet(rt, prompt, sampling)
    s = done.stats
    return {"tokens_per_s": timing.decode_tps, "n_tokens": s.n_tokens, "token_ids": list(done.token_ids),
            "acceptance": s.acceptance_rate if s.proposed else None,
            "tokens_per_pass": s.tokens_per_pass, "drafters_used": s.drafters_used, "text": done.text}


def _lookup_llm(target: Path, ctx: ContextParams):  # noqa: ANN202
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    # logits_all=True: without it this peer fails with a numpy shape error (0.3.36).
    return Llama(model_path=str(target), n_ctx=ctx.n_ctx, n_threads=ctx.threads(),
                 n_threads_batch=ctx.threads(), logits_all=True, verbose=False,
                 draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))


def _run_lookup(llm, prompt: list[int], max_tokens: int) -> dict:  # noqa: ANN001
    timing, text = time_llama(llm, prompt, max_tokens)
    return {"tokens_per_s": timing.decode_tps, "n_tokens": timing.n_tokens, "text": text}


def _compare(plain_rt: Runtime, prompt: list[int], plain_ids: list[int], run: dict) -> dict:
    """Identical to plain? Else where they part and the target's top-2 margin there."""
    ids = run.get("token_ids")
    if ids is None:  # peers give text only
        plain_text = plain_rt.target.detokenize(plain_ids)
        text = run.get("text")
        return {"identical": None if text is None else text == plain_text}
    if ids == plain_ids:
        return {"identical": True}
    i = next((i for i, (a, b) in enumerate(zip(ids, plain_ids)) if a != b), min(len(ids), len(plain_ids)))
    ctx = plain_rt.ctx
    ctx.clear()
    ctx.decode(prompt + plain_ids[:i])
    top2 = np.sort(ctx.logits())[-2:]
    ctx.clear()
    return {"identical": False, "first_diff": i, "margin": float(top2[1] - top2[0])}

