"""``python -m bench plain``: Duet's plain decoding against llama-cpp-python's ``Llama`` in one run.

Same model, prompt tokens, context, threads, batch and greedy sampling; the two engines take
turns, and the report gives the medians and the ratios (Duet / llama-cpp-python).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from bench.prompts import load_prompts
from bench.timing import RunTiming, median, peak_rss_mb, time_duet, time_llama
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plain", help="plain decoding vs llama-cpp-python's Llama, same run")
    p.add_argument("--model", default="target")
    p.add_argument("--prompt-id", default="summarize", help="prompt from resources/bench/prompts.json")
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


def _duet(rt: Runtime, prompt: list[int], params: SamplingParams) -> tuple[RunTiming, str]:
    timing, done = time_duet(rt, prompt, params)
    return timing, done.text


def run(args: argparse.Namespace) -> int:
    from llama_cpp import Llama  # lazy: llama-cpp-python's high-level API, only this benchmark's baseline

    path = resolve_model(args.model)
    ctx = ContextParams(n_ctx=args.ctx, n_threads=args.threads, flash_attn=False)
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    (bp,) = load_prompts(ids=(args.prompt_id,))
    results: dict[str, list[RunTiming]] = {"duet": [], "llama-cpp-python": []}
    with Runtime(RuntimeConfig(target=ModelSpec(path), context=ctx, sampling=params)) as rt:
        prompt = chat_tokens(rt.target, [Message("user", bp.text)])
        _duet(rt, prompt, params)  # warm-up (page cache, first-call costs)
        duet_rss = peak_rss_mb()
        llm = Llama(model_path=str(path), n_ctx=args.ctx, n_batch=512, n_threads=ctx.threads(),
                    n_threads_batch=ctx.threads(), flash_attn=False, verbose=False)
        time_llama(llm, prompt, args.max_tokens)
        duet_text = peer_text = ""
        for i in range(args.repeats):
            t, duet_text = _duet(rt, prompt, params)
            results["duet"].append(t)
            t, peer_text = time_llama(llm, prompt, args.max_tokens)
            results["llama-cpp-python"].append(t)
            log.info("repeat %d: duet %.1f tok/s, peer %.1f tok/s", i + 1,
                     results["duet"][-1].decode_tps, results["llama-cpp-python"][-1].decode_tps)
    summary: dict[str, dict[str, Any]] = {name: {"decode_tps": median(r.decode_tps for r in runs),
                      "prefill_tps": median(r.prefill_tps for r in runs),
                      "n_tokens": runs[-1].n_tokens, "n_prompt": runs[-1].n_prompt,
                      "runs": [[round(r.prefill_tps, 2), round(r.decode_tps, 2)] for r in runs]}
               for name, runs in results.items()}
    d, p = summary["duet"], summary["llama-cpp-python"]
    report = {
        "model": str(path), "prompt_id": bp.id, "threads": ctx.threads(), "repeats": args.repeats,
        "results": summary,
        "decode_ratio": d["decode_tps"] / p["decode_tps"],
        "prefill_ratio": d["prefill_tps"] / p["prefill_tps"],
        "same_text": duet_text == peer_text,
        "duet_peak_rss_mb": round(duet_rss, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "plain.json").write_text(json.dumps(report, indent=2))
    md = _markdown(report)
    (args.out / "plain.md").write_text(md)
    print(md)
    return 0


def _markdown(r: dict) -> str:
    d, p = r["results"]["duet"], r["results"]["llama-cpp-python"]
    return "\n".join([
        f"Plain decoding, {Path(r['model']).name}, prompt '{r['prompt_id']}' ({d['n_prompt']} tokens), "
        f"{r['threads']} threads, median of {r['repeats']}",
        "",
        "| engine | prefill tok/s | decode tok/s |",
        "|---|---|---|",
        f"| Duet | {d['prefill_tps']:.1f} | {d['decode_tps']:.2f} |",
        f"| llama-cpp-python Llama | {p['prefill_tps']:.1f} | {p['decode_tps']:.2f} |",
        f"| ratio | {r['prefill_ratio']:.3f} | {r['decode_ratio']:.3f} |",
        "",
        f"Duet peak RSS (model mmapped, before the peer loads): {r['duet_peak_rss_mb']} MB; "
        f"same tokens: {r['same_text']}",
    ])
