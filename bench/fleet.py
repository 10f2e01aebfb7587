"""``python -m bench fleet``: a second model asked of a running server (issue 57).

One server over two models, ``--first`` loaded at start and ``--second`` asked by name. Each
repeat, on a freshly started server:

- ``cold``: the first token of the first request for the second model (it loads first);
- ``load``: the second model unloaded (``/models/unload``), then loaded alone
  (``/models/load``, until the server lists it loaded);
- ``warm``: the first token of a request for the loaded second model (a prompt of its own);
- ``switch``: the first tokens of requests alternating between the two loaded models, and
  ``same``: of requests to one of them, each a prompt not seen before.

The targets: ``cold`` within ``load`` + ``warm`` (no cost beyond the load itself), and
``switch`` within ``same`` (switching costs nothing beyond the reply). Duet (``duet-cli serve``)
and, given ``--llama-server PATH``, llama-server's router mode (``--models-dir`` with the two
files, ``--models-max 4``) in turns, with the same threads, context and prompts. Medians over
``--repeats``. Writes ``OUT/fleet.json``.

``--together`` measures who decodes when (engine.runtime.cores) instead: both models loaded
(drafting off), two clients ask one model each at once, against the same two requests one
after the other, in turns; ``--tokens`` each, greedy; the replies must be the same both ways.
Writes ``OUT/fleet_together.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import client
from bench.process import empty_kv_store, free_port, start_server
from engine.runtime.runtime import resolve_model

log = logging.getLogger(__name__)

# Duet's model does idle work after its first reply (llguidance's view of the vocabulary, about
# 1.3 s on Qwen's; a verify-cost curve not measured yet): the warm requests come after it
SETTLE_S = 4.0
TOPICS = ("rivers", "bees", "copper", "owls", "tides", "kites", "ferns", "clocks", "maps", "tea",
          "salt", "comets", "glaciers", "violins", "deserts", "whales")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="a second model asked by name: its load and first token")
    p.add_argument("--first", default="test", help="the model loaded at start (default: test)")
    p.add_argument("--second", default="draft", help="the model asked by name (default: draft)")
    p.add_argument("--llama-server", type=Path, default=None, metavar="PATH",
                   help="also measure llama-server's router mode (a build with --models-dir)")
    p.add_argument("--drafter", default="auto", help="Duet's drafter (default: serve's, auto)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--switches", type=int, default=6, help="requests in the switch and same runs")
    p.add_argument("--together", action="store_true",
                   help="two models answering at once against one after the other")
    p.add_argument("--tokens", type=int, default=96, help="tokens per reply with --together")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)


class Prompts:
    """A new conversation every time, different from its first words on (its own system
    message): every request reads its whole prompt, as the cold one must. (Without a system
    message, the template's default one was cached for every request but the cold one, and
    the cold figure was charged with what the cache saves the others.)"""

    def __init__(self) -> None:
        self.i = 0

    def __call__(self) -> list[dict[str, str]]:
        self.i += 1
        topic = TOPICS[self.i % len(TOPICS)]
        return [{"role": "system", "content": f"{self.i}: answer in one short sentence."},
                {"role": "user", "content": f"Write one sentence about {topic}."}]


def ttft(port: int, model: str, messages: list[dict[str, str]]) -> float:
    body = {"model": model, "messages": messages, "stream": True,
            "temperature": 0, "max_tokens": 8, "cache_prompt": False}
    return client.post(port, "/v1/chat/completions", body).ttft_s


@contextmanager
def duet(first: Path, second: Path, args: argparse.Namespace) -> Iterator[tuple[int, str, str]]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="duet-bench-fleet-") as folder:
        for path in (first, second):
            (Path(folder) / path.name).symlink_to(path)
        cmd = [sys.executable, "-m", "engine", "serve", "--model", str(first), "--port", str(port),
               "--threads", str(args.threads), "--ctx", str(args.ctx), "--parallel", "1",
               "--models-dir", folder, "--drafter", args.drafter]
        with empty_kv_store(), start_server(cmd, port, "duet-cli serve", timeout_s=600):
            yield port, first.stem, second.stem


@contextmanager
def router(binary: Path, first: Path, second: Path,
           args: argparse.Namespace) -> Iterator[tuple[int, str, str]]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="llama-router-") as folder:
        for path in (first, second):
            (Path(folder) / path.name).symlink_to(path)
        cmd = [str(binary), "--models-dir", folder, "--models-max", "4", "-t", str(args.threads),
               "-c", str(args.ctx), "-np", "1", "--host", "127.0.0.1", "--port", str(port),
               "--no-webui"]
        with start_server(cmd, port, "llama-server (router)", timeout_s=600):
            yield port, first.stem, second.stem


def wait_loaded(port: int, model: str, timeout_s: float = 600) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        listed = client.get_json(port, "/models")
        for m in listed.get("data", ()):
            if m.get("id") == model and (m.get("status") or {}).get("value") == "loaded":
                return
        time.sleep(0.05)
    raise client.Failed(f"{model} did not load in {timeout_s:.0f} s")


def wait_unloaded(port: int, model: str, timeout_s: float = 120) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        listed = client.get_json(port, "/models")
        if all(m.get("id") != model or (m.get("status") or {}).get("value") == "unloaded"
               for m in listed.get("data", ())):
            return
        time.sleep(0.05)
    raise client.Failed(f"{model} did not unload in {timeout_s:.0f} s")


def one_repeat(server: Callable[[], Any], prompts: Prompts, switches: int) -> dict[str, float]:
    with server() as (port, first, second):
        ttft(port, first, prompts())  # the first model answers once (loaded, warm)
        cold = ttft(port, second, prompts())
        time.sleep(SETTLE_S)  # a normal first token: not one that meets the load's idle work
        warm = statistics.median(ttft(port, second, prompts()) for _ in range(3))
        client.post_json(port, "/models/unload", {"model": second})
        wait_unloaded(port, second)
        t0 = time.perf_counter()
        client.post_json(port, "/models/load", {"model": second})
        wait_loaded(port, second)
        load = time.perf_counter() - t0
        ttft(port, second, prompts())  # warm again after the load
        same = statistics.median(ttft(port, second, prompts()) for _ in range(switches))
        switch = statistics.median(ttft(port, (first, second)[i % 2], prompts())
                                   for i in range(switches))
        same_first = statistics.median(ttft(port, first, prompts()) for _ in range(switches))
    return {"cold_s": cold, "load_s": load, "warm_s": warm, "cold_over_load_warm": cold / (load + warm),
            "same_s": (same + same_first) / 2, "switch_s": switch,
            "switch_over_same": switch / ((same + same_first) / 2)}


ASKS = ("Explain, step by step, how a hash table resolves collisions, with an example.",
        "Describe in detail how a compiler turns source code into machine code.")


def ask(port: int, model: str, text: str, tokens: int) -> client.HttpReply:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "stream": True,
            "temperature": 0, "max_tokens": tokens, "stream_options": {"include_usage": True}}
    return client.post(port, "/v1/chat/completions", body)


def _into(out: list, i: int, fn: Callable[..., Any], *fn_args: Any) -> None:
    out[i] = fn(*fn_args)


def together(args: argparse.Namespace) -> int:
    first, second = resolve_model(args.first), resolve_model(args.second)
    rows: list[dict[str, float]] = []
    args = argparse.Namespace(**{**vars(args), "drafter": "none"})
    with duet(first, second, args) as (port, a, b):
        pairs = [(a, ASKS[0]), (b, ASKS[1])]
        alone = [ask(port, m, t, args.tokens) for m, t in pairs]  # both loaded and warm
        for r in range(args.repeats):
            t0 = time.perf_counter()
            apart = [ask(port, m, t, args.tokens) for m, t in pairs]
            apart_s = time.perf_counter() - t0
            both: list[client.HttpReply | None] = [None, None]
            threads = [threading.Thread(target=_into, args=(both, i, ask, port, *pairs[i], args.tokens))
                       for i in range(2)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            together_s = time.perf_counter() - t0
            if apart != alone or both != alone:
                raise client.Failed("the replies differ between together and apart")
            row = {"together_s": together_s, "apart_s": apart_s, "ratio": together_s / apart_s,
                   "tokens": sum(x.usage.get("completion_tokens", 0) for x in apart)}
            rows.append(row)
            log.info("repeat %d: %s", r + 1, {k: round(v, 3) for k, v in row.items()})
    medians = {k: round(statistics.median(x[k] for x in rows), 3) for k in rows[0]}
    out = {"first": first.name, "second": second.name, "threads": args.threads,
           "repeats": rows, "medians": medians}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet_together.json").write_text(json.dumps(out, indent=1))
    print(f"{first.name} and {second.name}, {args.tokens} tokens each, medians of {args.repeats}: "
          f"together {medians['together_s']:.2f} s, apart {medians['apart_s']:.2f} s, "
          f"{medians['ratio']:.2f}x; the same replies")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.together:
        return together(args)
    first, second = resolve_model(args.first), resolve_model(args.second)
    servers: dict[str, Callable[[], Any]] = {"duet": lambda: duet(first, second, args)}
    if args.llama_server is not None:
        servers["llama-server"] = lambda: router(args.llama_server, first, second, args)
    prompts = Prompts()
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    for r in range(args.repeats):
        for name, server in servers.items():  # in turns: the machine's drift reaches both
            row = one_repeat(server, prompts, args.switches)
            rows[name].append(row)
            log.info("repeat %d %s: %s", r + 1, name, {k: round(v, 3) for k, v in row.items()})
    out: dict[str, Any] = {"first": first.name, "second": second.name, "threads": args.threads,
                           "ctx": args.ctx, "repeats": rows, "medians": {}}
    for name, runs in rows.items():
        out["medians"][name] = {k: round(statistics.median(x[k] for x in runs), 3) for k in runs[0]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet.json").write_text(json.dumps(out, indent=1))
    print(f"second model {second.name} asked of a server running {first.name} "
          f"(medians of {args.repeats}):")
    print("| server | cold first token | load | warm first token | cold / (load + warm) | "
          "same-model first token | alternating | alternating / same |")
    print("|---|---|---|---|---|---|---|---|")
    for name, m in out["medians"].items():
        print(f"| {name} | {m['cold_s']:.2f} s | {m['load_s']:.2f} s | {m['warm_s']:.2f} s | "
              f"{m['cold_over_load_warm']:.2f} | {m['same_s']:.2f} s | {m['switch_s']:.2f} s | "
              f"{m['switch_over_same']:.2f} |")
    return 0
