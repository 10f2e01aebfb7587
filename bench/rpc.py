"""``python -m bench rpc``: the target local vs across two ``duet-cli worker`` processes.

Layouts: ``local`` (this process), ``loopback`` (two workers on 127.0.0.1) and, when this
process may make network namespaces (root on Linux, iproute2, the sch_netem module), ``netem``:
the two workers in a namespace of their own behind a veth pair with ``tc netem delay`` on both
ends (so a round trip costs twice the delay), made here and removed afterwards. Where netem is
refused, ``proxy`` gives the same delay each way from a user-space forwarder
(bench.latency). In each layout: plain decoding and
n-gram speculation on a copy-heavy edit prompt, greedy; tok/s, speculative speedup, and whether
the tokens equal the local plain run.

The claim to check: every saved target pass saves the network round trips of a pass, so the
speculative speedup under latency should be larger than locally (issue 18 asks for >= 1.5x).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.latency import DelayProxy
from bench.process import free_port, start_worker
from bench.prompts import load_prompts
from bench.timing import median, time_duet
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.errors import DuetError
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.llama.rpc import parse_endpoint
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model

log = logging.getLogger(__name__)

NS_ADDR, HOST_ADDR = "10.213.77.2", "10.213.77.1"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rpc", help="tok/s local vs across RPC workers, plain and speculative")
    p.add_argument("--model", default="target")
    p.add_argument("--prompt-id", default="edit-rename", help="a copy-heavy edit prompt")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0, help="threads here and in each worker")
    p.add_argument("--delay-ms", type=float, default=2.0, help="netem delay on each veth end")
    p.add_argument("--layouts", default="local,loopback,netem")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    (bp,) = load_prompts(ids=(args.prompt_id,))
    ctx = ContextParams(n_ctx=args.ctx, n_threads=args.threads)
    sampling = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    layouts = [x for x in args.layouts.split(",") if x]
    results: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    reference: dict[str, tuple[int, ...]] = {}  # each mode's tokens in the first layout
    for layout in layouts:  # (grows by "proxy" when netem is skipped)
        with ExitStack() as stack:
            try:
                endpoints = stack.enter_context(_workers(layout, args))
            except _Skip as e:
                skipped[layout] = str(e)
                log.warning("skipping %s: %s", layout, e)
                if layout == "netem" and "proxy" not in layouts:
                    layouts.append("proxy")  # the same delay from a user-space forwarder
                continue
            row: dict[str, Any] = {}
            for mode in ("plain", "ngram"):
                spec = SpeculativeParams(drafter="none" if mode == "plain" else "ngram")
                cfg = RuntimeConfig(target=ModelSpec(path, rpc=endpoints), context=ctx,
                                    sampling=sampling, speculative=spec)
                with Runtime(cfg) as rt:
                    prompt = chat_tokens(rt.target, [Message("user", bp.text)])
                    runs = [time_duet(rt, prompt, sampling) for _ in range(args.repeats)]
                done = runs[-1][1]
                reference.setdefault(mode, done.token_ids)
                row[mode] = {"decode_tps": median(t.decode_tps for t, _ in runs),
                             "n_tokens": done.stats.n_tokens,
                             "tokens_per_pass": round(done.stats.tokens_per_pass, 3),
                             "same_tokens_as_local": done.token_ids == reference[mode]}
                log.info("%s %s: %.2f tok/s", layout, mode, row[mode]["decode_tps"])
            plain = row["plain"]["decode_tps"]
            row["speedup"] = row["ngram"]["decode_tps"] / plain if plain else 0.0
            results[layout] = row
    report = {"model": str(path), "prompt_id": bp.id, "max_tokens": args.max_tokens,
              "threads": ctx.threads(), "delay_ms_each_way": args.delay_ms,
              "results": results, "skipped": skipped}
    for slow in ("netem", "proxy"):
        if "local" in results and slow in results and results["local"]["speedup"]:
            report[f"{slow}_vs_local_speedup"] = results[slow]["speedup"] / results["local"]["speedup"]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rpc.json").write_text(json.dumps(report, indent=2))
    md = _markdown(report)
    (args.out / "rpc.md").write_text(md)
    print(md)
    return 0


class _Skip(Exception):
    pass


@contextmanager
def _workers(layout: str, args: argparse.Namespace) -> Iterator[tuple[str, ...]]:
    """The endpoints of ``layout``'s two workers (none for local); torn down on exit."""
    if layout == "local":
        yield ()
        return
    if layout not in ("loopback", "netem", "proxy"):
        raise DuetError(f"unknown layout {layout!r} (local, loopback, netem, proxy)")
    with ExitStack() as stack:
        prefix: list[str] = []
        host = "127.0.0.1"
        if layout == "netem":
            prefix = ["ip", "netns", "exec", stack.enter_context(_namespace(args.delay_ms))]
            host = NS_ADDR
        if layout == "proxy":

            with _workers("loopback", args) as real:
                proxies = [DelayProxy(parse_endpoint(e), args.delay_ms / 1000) for e in real]
                try:
                    yield tuple(p.endpoint for p in proxies)
                finally:
                    for proxy in proxies:
                        proxy.close()
            return
        endpoints = tuple(f"{host}:{free_port()}" for _ in range(2))
        for endpoint in endpoints:
            stack.enter_context(start_worker(endpoint, threads=args.threads, prefix=prefix,
                                             extra=["--i-understand-this-is-unauthenticated"]))
        yield endpoints


@contextmanager
def _namespace(delay_ms: float) -> Iterator[str]:
    """A network namespace reached through a veth pair with netem delay on both ends."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        raise _Skip("iproute2 (ip, tc) is not installed")
    name = f"duet-bench-{os.getpid()}"
    host_if, ns_if = f"dbh{os.getpid() % 100000}", f"dbn{os.getpid() % 100000}"
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
        ["ip", "link", "set", ns_if, "netns", name],
        ["ip", "addr", "add", f"{HOST_ADDR}/24", "dev", host_if],
        ["ip", "link", "set", host_if, "up"],
        ["ip", "-n", name, "addr", "add", f"{NS_ADDR}/24", "dev", ns_if],
        ["ip", "-n", name, "link", "set", ns_if, "up"],
        ["ip", "-n", name, "link", "set", "lo", "up"],
        ["tc", "qdisc", "add", "dev", host_if, "root", "netem", "delay", f"{delay_ms}ms"],
        ["tc", "-n", name, "qdisc", "add", "dev", ns_if, "root", "netem", "delay", f"{delay_ms}ms"],
    ]
    try:
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                raise _Skip(f"'{' '.join(step)}' failed: {done.stderr.strip() or done.returncode}"
                            " (network namespaces and netem need root and the sch_netem module)")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)  # gone with the ns


def _markdown(r: dict) -> str:
    lines = [f"RPC layouts, {Path(r['model']).name}, prompt '{r['prompt_id']}', "
             f"{r['max_tokens']} tokens, {r['threads']} threads, netem {r['delay_ms_each_way']} ms "
             "each way", "",
             "| layout | plain tok/s | n-gram tok/s | speedup | tokens/pass | same tokens as local "
             "(plain, n-gram) |", "|---|---|---|---|---|---|"]
    for layout, row in r["results"].items():
        p, n = row["plain"], row["ngram"]
        lines.append(f"| {layout} | {p['decode_tps']:.2f} | {n['decode_tps']:.2f} | "
                     f"{row['speedup']:.2f}x | {n['tokens_per_pass']} | "
                     f"{p['same_tokens_as_local']}, {n['same_tokens_as_local']} |")
    for layout, why in r["skipped"].items():
        lines.append(f"\n{layout} skipped: {why}")
    for slow in ("netem", "proxy"):
        if f"{slow}_vs_local_speedup" in r:
            lines.append(f"\nspeculative speedup with {slow} latency / local: "
                         f"{r[f'{slow}_vs_local_speedup']:.2f}x")
    return "\n".join(lines)
