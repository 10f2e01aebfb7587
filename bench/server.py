"""``python -m bench server``: Duet's OpenAI-compatible server against llama.cpp's ``llama-server``.

Both are driven over loopback HTTP by the same client, greedy, on the same prompts (the shipped
speculative prompt set). For each prompt and server mode: generation tok/s as each server
reports it (``timings.predicted_per_second``), draft acceptance, and the ratio to llama-server's
best n-gram mode and to its plain mode. llama-server runs with ``cache_prompt`` on, one slot,
the same context and threads; it is skipped when no ``--llama-server`` binary is given. Every
repeat starts each server afresh and warms it up on another prompt, so the figures are a
prompt's first sight; the same request sent again is reported beside them (llama-server's
``ngram-mod`` and Duet's n-gram drafter both remember earlier replies).

Then, Duet alone: time to first token of the second turn of a ~2,000-token conversation next to
a one-line prompt, and two clients taking turns (what each turn re-prefilled). Writes a
Markdown table (``--out``, default docs/benchmarks/server.md) and the raw JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench import client
from bench.llama_server import NGRAM_MODES, SERVER_MODES, WARM_UP, llama_server
from bench.prompts import BenchPrompt, load_prompts
from bench.session import conversation
from bench.soak.report import keep_section
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.errors import DuetError
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model
from engine.server.app import ApiConfig, model_names
from engine.server.run import BackgroundServer, build

if TYPE_CHECKING:
    from engine.llama.model import Model
    from engine.runtime.service import Engine
    from engine.server.run import BackgroundServer

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("server", help="Duet's HTTP server against llama-server on the prompt set")
    p.add_argument("--model", default="target", help="GGUF path or starter key")
    p.add_argument("--draft", default=None, help="draft model for Duet (and llama-server's draft mode)")
    p.add_argument("--llama-server", type=Path, default=None, help="llama-server binary to compare")
    p.add_argument("--prompts", default="", help="comma-separated prompt ids (default: all)")
    p.add_argument("--max-tokens", type=int, default=300)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--conversation-tokens", type=int, default=2000,
                   help="length of the conversation for the second-turn timing (0: skip)")
    p.add_argument("--alternating-turns", type=int, default=3,
                   help="turns per client in the two-client test (0: skip)")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "server.md")
    p.add_argument("--note", default="", help="a line about the run (machine load, ...) for the report")
    p.set_defaults(func=run)


def chat(port: int, messages: list[dict], max_tokens: int, **extra: object) -> client.HttpReply:
    """A greedy streamed chat request with usage (the same for both servers)."""
    return client.post(port, "/v1/chat/completions",
                       {"messages": messages, "temperature": 0, "max_tokens": max_tokens,
                        "stream": True, "stream_options": {"include_usage": True}, **extra})


def _row(firsts: list[client.HttpReply], agains: list[client.HttpReply]) -> dict:
    """Medians over repeats of the first sight of a prompt, and of the same request sent again."""
    def tps(runs: list[client.HttpReply]) -> float:
        return statistics.median(float(r.timings.get("predicted_per_second", 0)) for r in runs)

    def acceptance(runs: list[client.HttpReply]) -> float | None:
        t = [r.timings for r in runs]
        n_draft = sum(x.get("draft_n", 0) for x in t)
        return sum(x.get("draft_n_accepted", 0) for x in t) / n_draft if n_draft else None

    return {"tokens_per_s": tps(firsts), "acceptance": acceptance(firsts),
            "n_tokens": statistics.median(int(r.timings.get("predicted_n", 0)) for r in firsts),
            "again_tokens_per_s": tps(agains), "again_acceptance": acceptance(agains),
            "text": firsts[-1].text}


def measure_once(port: int, prompts: list[BenchPrompt], args: argparse.Namespace,
                 extra: dict | None = None) -> dict[str, tuple[client.HttpReply, client.HttpReply]]:
    """On a fresh server: one warm-up of another prompt (``WARM_UP``: no drafter may have seen a
    timed reply), then each prompt twice: its first sight, and the same request again (what a
    client that retries or regenerates gets; n-gram tables that outlive a request draft it)."""
    extra = extra or {}
    chat(port, [{"role": "user", "content": WARM_UP}], 8, **extra)
    out = {}
    for bp in prompts:
        messages = [{"role": "user", "content": bp.text}]
        first = chat(port, messages, args.max_tokens, **extra)
        out[bp.id] = (first, chat(port, messages, args.max_tokens, **extra))
        log.info("%s: %.1f tok/s", bp.id, float(first.timings.get("predicted_per_second", 0)))
    return out


def combine(runs: list[dict], prompts: list[BenchPrompt]) -> dict:
    return {bp.id: _row([r[bp.id][0] for r in runs], [r[bp.id][1] for r in runs]) for bp in prompts}


# -- the servers --------------------------------------------------------------------------
def start_duet(args: argparse.Namespace) -> tuple[BackgroundServer, Engine]:

    config = RuntimeConfig(
        target=ModelSpec(resolve_model(args.model)),
        draft=ModelSpec(resolve_model(args.draft)) if args.draft else None,
        context=ContextParams(n_ctx=args.ctx, n_threads=args.threads),
        sampling=SamplingParams(temperature=0, max_tokens=args.max_tokens),
        speculative=SpeculativeParams(drafter="auto"))
    runtime = Runtime(config)
    model_id, aliases = model_names(runtime, args.model)
    engine, app = build(runtime, ApiConfig(model_id, aliases))
    return BackgroundServer(app), engine


def llama_modes(args: argparse.Namespace, prompts: list[BenchPrompt]
                ) -> tuple[dict[str, dict], dict[str, str]]:
    """Each llama-server mode's rows, and why the modes that failed did."""

    target = resolve_model(args.model)
    threads = ContextParams(n_threads=args.threads).threads()
    out, failed = {}, {}
    draft = resolve_model(args.draft) if args.draft else ""
    for mode, extra in SERVER_MODES.items():
        if "{draft}" in extra and not args.draft:
            continue
        runs = []
        try:
            for _ in range(args.repeats):  # each repeat on a fresh server
                with llama_server(args.llama_server, target, mode, threads=threads, ctx=args.ctx,
                                  draft=draft) as port:
                    runs.append(measure_once(port, prompts, args, {"cache_prompt": True}))
            out[mode] = combine(runs, prompts)
        except (DuetError, OSError, ValueError) as e:
            log.warning("%s failed: %s", mode, e)
            failed[mode] = str(e)[:300]
    return out, failed


# -- Duet's conversation caches -----------------------------------------------------------
def second_turn(port: int, model: Model, n_tokens: int) -> dict:
    """TTFT of a one-line prompt, of a conversation's first sight, and of its next turn."""

    # A new conversation (its own system line): only the template's opening can be reused.
    one_line = chat(port, [{"role": "system", "content": f"Session {time.time_ns()}."},
                           {"role": "user", "content": "Say hello in one line."}], 8)
    msgs = [{"role": m.role, "content": m.content} for m in conversation(model, n_tokens)]
    first = chat(port, msgs, 16)
    msgs += [{"role": "assistant", "content": first.text},
             {"role": "user", "content": "Thanks. Which one would you test first?"}]
    second = chat(port, msgs, 16)
    return {"one_line_ttft_s": one_line.ttft_s, "first_ttft_s": first.ttft_s,
            "second_ttft_s": second.ttft_s, "prompt_tokens": second.usage.get("prompt_tokens"),
            "second_prompt_n": second.timings.get("prompt_n"),
            "one_line_prompt_n": one_line.timings.get("prompt_n"),
            "ratio": second.ttft_s / one_line.ttft_s}


def alternating(port: int, turns: int) -> list[dict]:
    """Two clients (different system prompts) taking turns; per turn, what was re-prefilled."""
    systems = {"a": "You review Python code for a careful team. " * 10,
               "b": "You answer questions about the weather, briefly. " * 10}
    chats = {k: [{"role": "system", "content": s}] for k, s in systems.items()}
    seen = {k: 0 for k in chats}
    rows = []
    for turn in range(turns):
        for name, msgs in chats.items():
            msgs.append({"role": "user", "content": f"Question {turn + 1} from {name}: go on."})
            r = chat(port, msgs, 16)
            msgs.append({"role": "assistant", "content": r.text})
            n_prompt = r.usage.get("prompt_tokens", 0)
            rows.append({"client": name, "turn": turn + 1, "prompt_tokens": n_prompt,
                         "new_tokens": n_prompt - seen[name],
                         "prefilled": r.timings.get("prompt_n"),
                         "cached": r.timings.get("cache_n")})
            seen[name] = n_prompt + r.usage.get("completion_tokens", 0)
    return rows


# -- report ----------------------------------------------------------------------------------
def markdown(report: dict) -> str:
    lines = ["# Duet's server against llama-server\n",
             f"`{report.get('command') or 'python -m bench server'}` on {report['machine']}: "
             f"{Path(report['model']).name}, greedy, max {report['max_tokens']} tokens, "
             f"{report['threads']} threads, median of {report['repeats']}; generation tok/s as each "
             f"server reports it (`timings.predicted_per_second`), same loopback client.\n"]
    if report.get("note"):
        lines.append(f"{report['note']}\n")
    best = report.get("llama_best_ngram") or {}
    plain = report["modes"].get("server-plain", {})
    lines += ["| prompt | kind | server | tok/s | acceptance | × llama-server best n-gram | "
              "× llama-server plain | tok/s, the same request again (acceptance) |",
              "|---|---|---|---|---|---|---|---|"]
    for bp in report["prompts"]:
        for mode, rows in report["modes"].items():
            r = rows.get(bp["id"])
            if r is None:
                continue
            vs_best = r["tokens_per_s"] / best[bp["id"]] if best.get(bp["id"]) else None
            vs_plain = (r["tokens_per_s"] / plain[bp["id"]]["tokens_per_s"]
                        if plain.get(bp["id"], {}).get("tokens_per_s") else None)
            acc = "–" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
            again = "–" if r.get("again_acceptance") is None else f"{r['again_acceptance']:.2f}"
            lines.append(f"| {bp['id']} | {bp['kind']} | {mode} | {r['tokens_per_s']:.1f} | {acc} | "
                         f"{'–' if vs_best is None else f'{vs_best:.2f}'} | "
                         f"{'–' if vs_plain is None else f'{vs_plain:.2f}'} | "
                         f"{r.get('again_tokens_per_s', 0):.1f} ({again}) |")
    if not report.get("llama_server"):
        lines.append("\nNo `--llama-server` binary was given: Duet alone.")
    for mode, why in (report.get("failed_modes") or {}).items():
        lines.append(f"\n{mode} failed: {why}")
    st = report.get("second_turn")
    if st:
        lines += ["\n## Second turn of a conversation\n",
                  f"A {st['prompt_tokens']}-token conversation: its second turn re-prefilled "
                  f"{st['second_prompt_n']} tokens; time to first token {st['second_ttft_s'] * 1000:.0f} ms "
                  f"against {st['one_line_ttft_s'] * 1000:.0f} ms for a one-line prompt in a new "
                  f"conversation ({st['one_line_prompt_n']} tokens prefilled) "
                  f"(**{st['ratio']:.2f}×**; target ≤ 1.5×) and {st['first_ttft_s'] * 1000:.0f} ms "
                  f"for the conversation's first sight."]
    alt = report.get("alternating")
    if alt:
        lines += ["\n## Two clients taking turns\n",
                  "| client | turn | prompt tokens | new since its last turn | re-prefilled | from cache |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['client']} | {r['turn']} | {r['prompt_tokens']} | {r['new_tokens']} | "
                  f"{r['prefilled']} | {r['cached']} |" for r in alt]
        cache = report.get("cache") or {}
        lines.append(f"\nState cache: {cache.get('restores', 0)} restores, {cache.get('saves', 0)} saves, "
                     f"hit rate {cache.get('hit_rate', 0):.2f} (tokens {cache.get('token_hit_rate', 0):.2f}).")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:

    prompts = load_prompts(ids=tuple(x for x in args.prompts.split(",") if x))
    report: dict = {"model": str(resolve_model(args.model)), "model_arg": args.model,
                    "max_tokens": args.max_tokens, "repeats": args.repeats,
                    "threads": ContextParams(n_threads=args.threads).threads(),
                    "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
                    "llama_server": str(args.llama_server) if args.llama_server else None,
                    "note": args.note, "command": "python -m bench " + " ".join(sys.argv[1:]),
                    "prompts": [{"id": p.id, "kind": p.kind} for p in prompts], "modes": {}}
    runs = []
    for i in range(args.repeats):  # each repeat on a fresh server, as for llama-server
        server, engine = start_duet(args)
        try:
            runs.append(measure_once(server.port, prompts, args))
            if i == args.repeats - 1:
                if args.conversation_tokens:
                    report["second_turn"] = second_turn(server.port, engine.runtime.target,
                                                        args.conversation_tokens)
                if args.alternating_turns:
                    report["alternating"] = alternating(server.port, args.alternating_turns)
                report["cache"] = engine.stats()["cache"]
        finally:
            server.close()
            engine.close()
    report["modes"]["duet-auto"] = combine(runs, prompts)
    if args.llama_server:
        modes, report["failed_modes"] = llama_modes(args, prompts)
        report["modes"].update(modes)
        report["llama_best_ngram"] = {
            bp.id: max((report["modes"][m][bp.id]["tokens_per_s"] for m in NGRAM_MODES
                        if bp.id in report["modes"].get(m, {})), default=None) for bp in prompts}
    text = markdown(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(keep_section(args.out, text), encoding="utf-8")  # the soak's section stays
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(text)
    return 0
