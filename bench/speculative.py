"""``python -m bench speculative``: every drafting mode on a prompt set, greedy, one run.

Prompts: the shipped set (resources/bench), or with ``--suite`` the suite built at run time from
the interpreter's standard library (bench/suite.py), reported per category.
Modes: plain, ngram, model, auto (Duet), lookup (llama-cpp-python's LlamaPromptLookupDecoding),
and, given ``--llama-server PATH``, llama.cpp's own server in its n-gram and draft modes.
For each prompt and mode: tokens/s (generation only), speedup against plain measured in the
same run, acceptance, tokens per target pass, and whether the tokens equal plain decoding
(else the first differing index and the target's top-2 logit margin there). Modes take turns
on each prompt (plain, then each mode, ``--repeats`` times) so that drift hits all alike.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench import suite as suite_mod
from bench.llama_server import SERVER_MODES, run_server_modes
from bench.prompts import BenchPrompt, load_prompts
from bench.report import chart, markdown_table, suite_chart, suite_markdown, summarize
from bench.timing import first_difference, median, time_duet, time_llama, time_stream
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.errors import DuetError
from engine.events import Done, Token, collect
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model

if TYPE_CHECKING:
    from llama_cpp import Llama

    from bench.suite import SuitePrompt

log = logging.getLogger(__name__)

DUET_MODES = ("plain", "ngram", "model", "auto")
SET_MODES = "plain,ngram,model,auto,lookup"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("speculative", help="drafting modes and peers on the prompt set or the suite")
    p.add_argument("--model", default="target")
    p.add_argument("--draft", default="draft")
    p.add_argument("--modes", default=None,
                   help=f"comma-separated: plain,ngram,model,auto,lookup (default: {SET_MODES}; "
                        f"with --suite: {','.join(DUET_MODES)}); with --llama-server, server modes "
                        "named here (server-plain, server-ngram-mod, ...) limit the ones run")
    p.add_argument("--prompts", default="", help="comma-separated prompt ids (default: all)")
    p.add_argument("--suite", action="store_true",
                   help="the suite built from the standard library instead of the shipped prompts")
    p.add_argument("--category", default="",
                   help=f"with --suite: comma-separated categories ({','.join(suite_mod.CATEGORIES)})")
    p.add_argument("--per-category", type=int, default=0,
                   help="with --suite: at most N prompts of each category (0: all)")
    p.add_argument("--max-tokens", type=int, default=300)
    p.add_argument("--repeats", type=int, default=1, help="runs of each prompt and mode (median)")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--inexact", action="store_true",
                   help="exact decoding off (weights repacked: how llama.cpp runs as released)")
    p.add_argument("--draft-max", type=int, default=SpeculativeParams().draft_max)
    p.add_argument("--llama-server", type=Path, default=None, help="llama-server binary to compare")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


def _prompts(args: argparse.Namespace) -> list:
    """The shipped prompts, or the suite's selection (raising ValueError on a bad selection)."""
    ids = tuple(x for x in args.prompts.split(",") if x)
    if not args.suite:
        return load_prompts(ids=ids)
    try:
        suite = suite_mod.build_suite()
    except (ImportError, OSError) as e:  # an install without the stdlib's sources or pydoc_data
        raise ValueError(f"cannot build the suite from this interpreter's standard library: {e}") from None
    chosen = suite_mod.select(suite, tuple(c for c in args.category.split(",") if c), args.per_category)
    return [p for p in chosen if not ids or p.id in ids]


def run(args: argparse.Namespace) -> int:
    asked = [m for m in (args.modes or (",".join(DUET_MODES) if args.suite else SET_MODES)).split(",") if m]

    server_modes = [m for m in asked if m in SERVER_MODES]  # with --llama-server (none named: all)
    if server_modes and "server-plain" not in server_modes:
        server_modes.insert(0, "server-plain")  # each server mode's ratio is to its own plain
    modes = ["plain"] + [m for m in dict.fromkeys(asked) if m not in ("plain", *SERVER_MODES)]
    unknown = set(asked) - set(DUET_MODES) - {"lookup"} - set(SERVER_MODES)
    if unknown:
        raise DuetError(f"unknown modes: {', '.join(sorted(unknown))}")
    if args.suite and "lookup" in modes:
        raise DuetError("the lookup peer is not run on the suite (its multi-turn prompts need a cache)")
    try:
        prompts = _prompts(args)
    except ValueError as e:
        raise DuetError(str(e)) from None
    if not prompts:
        raise DuetError("no prompts selected")
    target, draft = resolve_model(args.model), resolve_model(args.draft)
    ctx = ContextParams(n_ctx=args.ctx, n_threads=args.threads, exact=not args.inexact)
    sampling = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    runtimes = {m: _runtime(m, target, draft, ctx, sampling, args.draft_max)
                for m in modes if m in DUET_MODES}
    lookup = _lookup_llm(target, ctx) if "lookup" in modes else None
    rows = []
    try:
        for bp in prompts:
            turns = getattr(bp, "turns", (bp.text,))
            per_mode: dict[str, list[dict]] = {}
            for _ in range(args.repeats):
                for mode in modes:
                    if mode == "lookup":
                        assert lookup is not None  # made when "lookup" is among the modes
                        prompt = chat_tokens(runtimes["plain"].target, [Message("user", bp.text)])
                        run_ = _run_lookup(lookup, prompt, args.max_tokens)
                    elif args.suite:
                        run_ = _run_turns(runtimes[mode], turns, sampling)
                    else:
                        prompt = chat_tokens(runtimes["plain"].target, [Message("user", bp.text)])
                        run_ = _run_duet(runtimes[mode], prompt, sampling)
                        run_["prompt_ids"] = prompt
                    per_mode.setdefault(mode, []).append(run_)
            if args.llama_server:

                per_mode.update(run_server_modes(args.llama_server, target, draft, turns,
                                                 args.max_tokens, ctx.threads(), args.repeats,
                                                 server_modes))
            rows += _rows(bp, per_mode, runtimes["plain"])
    finally:
        for rt in runtimes.values():
            rt.close()
    report = {"model": str(target), "draft": str(draft), "threads": ctx.threads(),
              "max_tokens": args.max_tokens, "repeats": args.repeats, "rows": rows}
    name = "speculative"
    if args.suite:
        name = "suite"
        report.update(python=platform.python_version(), suite_seed=suite_mod.SEED,
                      suite_hash=suite_mod.suite_hash(suite_mod.build_suite()),  # the whole suite's
                      n_prompts=len(prompts), summary=summarize(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(report, indent=2))
    md = suite_markdown(report) if args.suite else markdown_table(report)
    (args.out / f"{name}.md").write_text(md)
    (suite_chart if args.suite else chart)(report, args.out / f"{name}.png")
    print(md)
    return 0


def _rows(bp: BenchPrompt | SuitePrompt, per_mode: dict[str, list[dict]], plain_rt: Runtime
          ) -> list[dict]:
    """One row per mode: medians of the runs, the ratio to plain and the identity check."""
    plain_tps = median(r["tokens_per_s"] for r in per_mode["plain"])
    server_tps = median(r["tokens_per_s"] for r in per_mode.get("server-plain", []))
    plain_last = per_mode["plain"][-1]
    rows = []
    for mode, runs in per_mode.items():
        last = runs[-1]
        row = {"prompt": bp.id, "kind": bp.kind, "category": getattr(bp, "category", bp.kind),
               "mode": mode, "tokens_per_s": median(r["tokens_per_s"] for r in runs),
               "n_tokens": last["n_tokens"], "acceptance": last.get("acceptance"),
               "tokens_per_pass": last.get("tokens_per_pass"),
               "drafters_used": last.get("drafters_used")}
        if "n_cached" in last:
            row["n_cached"] = last["n_cached"]
        base = server_tps if mode.startswith("server-") else plain_tps  # each against its own plain
        row["speedup"] = row["tokens_per_s"] / base if base else 0.0
        row.update(_compare(plain_rt, plain_last["prompt_ids"], plain_last["token_ids"], last))
        rows.append(row)
        log.info("%s %s: %.1f tok/s (x%.2f)", bp.id, mode, row["tokens_per_s"], row["speedup"])
    return rows


def _run_turns(rt: Runtime, turns: tuple[str, ...], sampling: SamplingParams) -> dict:
    """A conversation on one context: every turn but the last sets up the history (its reply
    goes into the next prompt, its cache stays), the last is timed. The drafter is reset once,
    before the first turn, as for a new conversation. The cache is not cleared: a repeat reuses
    the prompt's cached prefix, which only skips prefill (not timed)."""
    if rt.speculation is not None:
        rt.speculation.reset()
    messages: list[Message] = []
    for i, text in enumerate(turns):
        messages.append(Message("user", text))
        prompt = chat_tokens(rt.target, messages)
        events = rt.generator.complete(prompt, sampling)
        if i < len(turns) - 1:
            done = collect(events)
            messages.append(Message("assistant", done.text))
    timing, timed = time_stream(len(prompt), events, count=lambda e: isinstance(e, Token))
    last = timed[-1]
    assert isinstance(last, Done)
    done = last
    result = _result(timing.decode_tps, done)
    result["prompt_ids"] = prompt
    if len(turns) > 1:
        result["n_cached"] = done.stats.n_cached_tokens  # turn 2's prompt tokens found in the cache
    return result


def _result(tokens_per_s: float, done: Done) -> dict:
    s = done.stats
    return {"tokens_per_s": tokens_per_s, "n_tokens": s.n_tokens, "token_ids": list(done.token_ids),
            "acceptance": s.acceptance_rate if s.proposed else None,
            "tokens_per_pass": s.tokens_per_pass, "drafters_used": s.drafters_used, "text": done.text}


def _runtime(mode: str, target: Path, draft: Path, ctx: ContextParams, sampling: SamplingParams,
             draft_max: int) -> Runtime:
    drafter = {"plain": "none"}.get(mode, mode)
    cfg = RuntimeConfig(target=ModelSpec(target), context=ctx, sampling=sampling,
                        draft=ModelSpec(draft) if mode in ("model", "auto") else None,
                        speculative=SpeculativeParams(drafter=drafter, draft_max=draft_max))
    return Runtime(cfg)


def _run_duet(rt: Runtime, prompt: list[int], sampling: SamplingParams) -> dict:
    timing, done = time_duet(rt, prompt, sampling)
    return _result(timing.decode_tps, done)


def _lookup_llm(target: Path, ctx: ContextParams) -> Llama:
    # lazy: llama-cpp-python's high-level API, only for the baseline it measures
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    # logits_all=True: without it this peer fails with a numpy shape error (0.3.36).
    return Llama(model_path=str(target), n_ctx=ctx.n_ctx, n_threads=ctx.threads(),
                 n_threads_batch=ctx.threads(), logits_all=True, verbose=False,
                 draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))


def _run_lookup(llm: Llama, prompt: list[int], max_tokens: int) -> dict:
    timing, text = time_llama(llm, prompt, max_tokens)
    return {"tokens_per_s": timing.decode_tps, "n_tokens": timing.n_tokens, "text": text}


def _compare(plain_rt: Runtime, prompt: list[int], plain_ids: list[int], run: dict) -> dict:
    """Identical to plain? Else where they part and the target's top-2 margin there."""
    ids = run.get("token_ids")
    if ids is None:  # peers give text only
        plain_text = plain_rt.target.detokenize(plain_ids)
        text = run.get("text")
        return {"identical": None if text is None else text == plain_text}
    run_prompt = run.get("prompt_ids", prompt)
    if run_prompt != prompt:  # an earlier turn's reply parted, so the timed turn's prompts differ
        i = first_difference(run_prompt, prompt)
        return {"identical": False, "earlier_turn": True, "first_diff": i,
                "margin": _margin(plain_rt, prompt[:i])}
    if ids == plain_ids:
        return {"identical": True}
    i = first_difference(ids, plain_ids)
    return {"identical": False, "first_diff": i, "margin": _margin(plain_rt, prompt + plain_ids[:i])}


def _margin(plain_rt: Runtime, tokens: list[int]) -> float:
    """The target's top-2 logit margin for the token after ``tokens``."""
    ctx = plain_rt.ctx
    ctx.clear()
    ctx.decode(tokens)
    top2 = np.sort(ctx.logits())[-2:]
    ctx.clear()
    return float(top2[1] - top2[0])

