"""``python -m bench parallel``: several clients at once on one server, Duet against llama-server.

Each configuration (server, mode, number of clients N) runs on a fresh server started with N
slots (``--parallel N`` / ``-np N``), after one warm-up request of a prompt no client sends. Then:

- together: N clients send a different prompt each at the same moment (greedy, streamed); the
  aggregate rate is all completion tokens over the time from the first request to the last end,
  and each client's time to first token is kept;
- late (N > 1): N - 1 clients start, and once each streams, one more client sends its prompt:
  its time to first token is what a newcomer waits while the others stream.

With ``--system FILE`` every client sends that text as its system prompt and a short question of
its own: one agent's parallel requests, whose shared start a server may read once.

Medians over ``--repeats`` fresh servers; in each repeat every configuration runs once, in
turns. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench import client
from bench.llama_server import WARM_UP, ngl
from bench.process import empty_kv_store, free_port, rss_bytes, start_server
from bench.prompts import load_prompts
from engine.runtime.runtime import resolve_model

log = logging.getLogger(__name__)

QUESTION = "Question {i}: in two sentences, what does section {i} of the text above say?"

REPO = Path(__file__).resolve().parents[1]
DUET_MODES = {"duet-plain": ["--drafter", "none"], "duet-ngram": ["--drafter", "ngram"],
              "duet-default": []}  # duet-cli serve with no flags (four sequences, auto drafter)
LLAMA_MODES = {"server-plain": ["--spec-type", "none"], "server-ngram-mod": ["--spec-type", "ngram-mod"],
               "server-default": []}  # llama-server with no flags (its own slots and context)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("parallel", help="N clients at once: aggregate tok/s and time to first token")
    p.add_argument("--model", default="target", help="GGUF path or starter key")
    p.add_argument("--llama-server", type=Path, default=None, help="llama-server binary to compare")
    p.add_argument("--clients", default="1,2,4,8", help="comma-separated client counts")
    p.add_argument("--modes", default="", help="comma-separated modes (default: all of "
                   + ", ".join([*DUET_MODES, *LLAMA_MODES]) + ")")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ctx", type=int, default=2048, help="context per slot")
    p.add_argument("--threads", type=int, default=0, help="0: all cores")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers offloaded to the GPU, both servers (-1: all)")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "parallel.md")
    p.add_argument("--note", default="", help="a line about the run for the report")
    p.add_argument("--system", type=Path, default=None,
                   help="a text file every client sends as its system prompt, each with a short "
                        "question of its own (one agent's parallel requests)")
    p.set_defaults(func=run)


def _server(mode: str, n: int, args: argparse.Namespace, model: Path) -> tuple[Any, int]:
    port = free_port()
    threads = args.threads or os.cpu_count() or 1
    if mode.endswith("-default"):  # what a person who starts it gets
        cmd = [sys.executable, "-m", "engine", "serve", "--model", str(model), "--port", str(port),
               "--threads", str(threads)] if mode in DUET_MODES else \
            [str(args.llama_server), "-m", str(model), "-t", str(threads), "--host", "127.0.0.1",
             "--port", str(port), "--no-webui"]
    elif mode in DUET_MODES:
        # --ctx is the cells the sequences share (as llama-server's -c with -np)
        cmd = [sys.executable, "-m", "engine", "serve", "--model", str(model), "--port", str(port),
               "--parallel", str(n), "--ctx", str(args.ctx * n), "--threads", str(threads),
               "--gpu-layers", str(args.gpu_layers), "--max-queue", str(2 * n), *DUET_MODES[mode]]
    else:
        cmd = [str(args.llama_server), "-m", str(model), "-t", str(threads), "-c", str(args.ctx * n),
               "-np", str(n), "-ngl", ngl(args.gpu_layers), "--host", "127.0.0.1", "--port", str(port), "--no-webui",
               *LLAMA_MODES[mode]]
    return start_server(cmd, port, mode, timeout_s=300), port


def _messages(text: str, system: str | None) -> list[dict]:
    return [*([{"role": "system", "content": system}] if system else []),
            {"role": "user", "content": text}]


def _ask(port: int, text: str, max_tokens: int, system: str | None = None) -> client.HttpReply:
    return client.post(port, "/v1/chat/completions",
                       {"messages": _messages(text, system), "temperature": 0,
                        "max_tokens": max_tokens, "stream": True,
                        "stream_options": {"include_usage": True}})


def _threads(jobs: list[Callable[[], None]]) -> None:
    ts = [threading.Thread(target=j, daemon=True) for j in jobs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def together(port: int, prompts: list[str], max_tokens: int, system: str | None = None) -> dict:
    """All clients at once: aggregate tok/s and each one's time to first token."""
    replies: list[client.HttpReply | None] = [None] * len(prompts)
    errors: list[str] = []
    start = threading.Barrier(len(prompts))

    def job(i: int) -> Callable[[], None]:
        def go() -> None:
            start.wait()
            try:
                replies[i] = _ask(port, prompts[i], max_tokens, system)
            except client.Failed as e:
                errors.append(str(e))
        return go

    t0 = time.perf_counter()
    _threads([job(i) for i in range(len(prompts))])
    wall = time.perf_counter() - t0
    if errors or any(r is None for r in replies):
        raise client.Failed(errors[0] if errors else "a client got no reply")
    done = [r for r in replies if r is not None]
    tokens = sum(int(r.usage.get("completion_tokens", 0)) for r in done)
    return {"aggregate_tps": tokens / wall, "tokens": tokens,
            "ttft_s": statistics.median(r.ttft_s for r in done),
            "max_ttft_s": max(r.ttft_s for r in done)}


def late(port: int, prompts: list[str], max_tokens: int, system: str | None = None) -> float:
    """N - 1 clients streaming, then one more: the newcomer's time to first token."""
    streaming = threading.Semaphore(0)
    out: dict[str, float] = {}

    def early(text: str) -> Callable[[], None]:
        return lambda: _stream_signalling(port, text, max_tokens, streaming, system)

    def newcomer() -> None:
        for _ in prompts[:-1]:
            streaming.acquire()
        out["ttft"] = _ask(port, prompts[-1], max_tokens, system).ttft_s

    _threads([*[early(p) for p in prompts[:-1]], newcomer])
    return out["ttft"]


def _stream_signalling(port: int, text: str, max_tokens: int, first: threading.Semaphore,
                       system: str | None = None) -> None:
    """A streamed request that releases ``first`` at its first content chunk (or when it fails,
    so that the newcomer never waits forever)."""
    body = {"messages": _messages(text, system), "temperature": 0,
            "max_tokens": max_tokens, "stream": True}
    released = False
    try:
        with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body,
                          timeout=900, trust_env=False) as r:
            for raw in r.iter_lines():
                line = raw.strip()
                if not released and line.startswith("data: {") and '"content":"' in line.replace(" ", ""):
                    first.release()
                    released = True
    except httpx.HTTPError as e:
        log.warning("an early client failed: %s", e)
    finally:
        if not released:
            first.release()


def run(args: argparse.Namespace) -> int:

    model = resolve_model(args.model)
    texts = [p.text for p in load_prompts()]
    system = args.system.read_text(encoding="utf-8") if args.system else None
    if system:  # one agent's parallel requests: the same long system prompt, short questions
        texts = [QUESTION.format(i=i) for i in range(16)]
    counts = [int(x) for x in args.clients.split(",") if x]
    modes = [m for m in (args.modes.split(",") if args.modes else [*DUET_MODES, *LLAMA_MODES])
             if m in DUET_MODES or args.llama_server is not None]
    runs: dict[tuple[str, int], list[dict]] = {}
    lates: dict[tuple[str, int], list[float]] = {}
    rss: dict[tuple[str, int], list[int]] = {}
    for _ in range(args.repeats):  # the modes take turns, so that a drift hits them alike
        for mode in modes:
            for n in counts:
                with empty_kv_store():
                    proc, port = _server(mode, n, args, model)
                    with proc:
                        _ask(port, WARM_UP, 8)
                        runs.setdefault((mode, n), []).append(
                            together(port, texts[:n], args.max_tokens, system))
                        if n > 1:
                            lates.setdefault((mode, n), []).append(
                                late(port, texts[n:2 * n] or texts[:n], args.max_tokens, system))
                        rss.setdefault((mode, n), []).append(rss_bytes(proc.pid) or 0)
    results: dict[str, dict[int, dict]] = {}
    for (mode, n), rs in runs.items():
        row = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        row["late_ttft_s"] = statistics.median(lates[mode, n]) if (mode, n) in lates else None
        row["rss_mb"] = statistics.median(rss[mode, n]) / 2**20
        results.setdefault(mode, {})[n] = row
        log.info("%s, %d clients: %.2f tok/s, first token %.2f s", mode, n,
                 row["aggregate_tps"], row["ttft_s"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(results, args), encoding="utf-8")
    print(args.out)
    return 0


def markdown(results: dict[str, dict[int, dict]], args: argparse.Namespace) -> str:
    lines = ["# Several clients at once", "",
             f"`python -m bench parallel --clients {args.clients} --max-tokens {args.max_tokens} "
             f"--repeats {args.repeats} --ctx {args.ctx}" + (f" --system {args.system}" if args.system else "")
             + (" --llama-server PATH`" if args.llama_server else "`"),
             "", args.note, "",
             "| mode | clients | aggregate tok/s | median first token (s) | slowest first token (s) "
             "| newcomer's first token (s) | server RSS (MiB) |", "|---|---|---|---|---|---|---|"]
    for mode, rows in results.items():
        for n, r in rows.items():
            late_s = f"{r['late_ttft_s']:.2f}" if r["late_ttft_s"] is not None else "–"
            lines.append(f"| {mode} | {n} | {r['aggregate_tps']:.2f} | {r['ttft_s']:.2f} | "
                         f"{r['max_ttft_s']:.2f} | {late_s} | {r['rss_mb']:.0f} |")
    return "\n".join(lines) + "\n"
