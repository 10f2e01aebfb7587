"""``python -m bench structured``: the requests agents send, Duet against llama-server.

Two requests, each on a fresh server per repeat (after one warm-up of an unrelated prompt), the
same body to both servers, the modes in turns (each repeat runs every mode once):

- extraction: a standard-library module's source (cut at run time by bench.stdlib_text,
  so nobody on the project wrote it) and a JSON schema for its top-level functions (name,
  parameters, one-line summary) in ``response_format``; rated by the server's own generation
  rate (``timings.predicted_per_second``) and by its generation time (``predicted_ms``: the
  time to the whole object, which also counts the tokens a layout spends), and checked
  against the schema;
- tool turn: a question and a tool to answer it (``tools``), then the conversation sent back with
  the call and the tool's result, as an agent sends it; rated by the two requests' wall time. The
  second body is the same on both servers whatever the first reply was (the call is the bench's
  own ``CALL``), so both do the same work even where one server's parser misses the call the
  model wrote; whether the first reply came back as a parsed call is reported beside the time.

Duet runs plain (``--drafter none``) and with its default drafter; llama-server with ``--jinja``
and each of its n-gram modes (its grammar constrains the reply in every mode). Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import client
from bench.llama_server import WARM_UP, ngl
from bench.process import free_port, start_server
from bench.stdlib_text import excerpt
from engine.runtime.runtime import resolve_model

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
DUET_MODES = {"duet-plain": ["--drafter", "none"], "duet-auto": ["--drafter", "auto"]}
LLAMA_MODES = {"server-plain": ["--spec-type", "none"],
               "server-ngram-simple": ["--spec-type", "ngram-simple"],
               "server-ngram-mod": ["--spec-type", "ngram-mod"],
               "server-ngram-map-k": ["--spec-type", "ngram-map-k"]}
MODULE, START = "colorsys", "rgb_to_yiq"  # the excerpt: three functions, 58 lines

SCHEMA = {"type": "object", "required": ["functions"], "additionalProperties": False,
          "properties": {"functions": {"type": "array", "items": {
              "type": "object", "required": ["name", "parameters", "summary"],
              "additionalProperties": False,
              "properties": {"name": {"type": "string"},
                             "parameters": {"type": "array", "items": {"type": "string"}},
                             "summary": {"type": "string"}}}}}}

TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "description": "the city's name"}}}}}
QUESTION = "What is the weather like in Lisbon right now? Use the tool."
RESULT = json.dumps({"city": "Lisbon", "temperature_c": 19, "sky": "clear", "wind_kmh": 12})
CALL: dict[str, Any] = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Lisbon"})}}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("structured", help="JSON-schema extraction and a tool turn, against llama-server")
    p.add_argument("--model", default="target", help="GGUF path or starter key")
    p.add_argument("--llama-server", type=Path, default=None, help="llama-server binary to compare")
    p.add_argument("--modes", default="", help="comma-separated modes (default: all)")
    p.add_argument("--parts", default="extraction,tool", help="which of extraction,tool to run")
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0, help="0: all cores")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers offloaded to the GPU, both servers (-1: all)")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "structured.md")
    p.add_argument("--note", default="", help="a line about the run for the report")
    p.set_defaults(func=run)


def extraction_body(max_tokens: int) -> dict[str, Any]:
    ex = excerpt(MODULE, START)
    if ex is None:
        raise client.Failed(f"no source for {MODULE} in this interpreter")
    text = (f"Here is part of Python's `{MODULE}` module:\n\n```python\n{ex.code}\n```\n\n"
            "List its top-level functions and classes with their parameters and a one-line summary.")
    return {"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": max_tokens,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "functions", "strict": True, "schema": SCHEMA}}}


def tool_turn(port: int, max_tokens: int) -> dict[str, Any]:
    """The call, then the answer with the result: wall time of both, whether the first reply was
    a parsed call, and the tokens each reply took (the same on both servers means the same work)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    t0 = time.perf_counter()
    first = _post_raw(port, {"messages": messages, "tools": [TOOL], "temperature": 0,
                             "max_tokens": max_tokens})
    called = [_named(c) for c in first["choices"][0]["message"].get("tool_calls") or []] == [_named(CALL)]
    messages += [{"role": "assistant", "content": "", "tool_calls": [CALL]},
                 {"role": "tool", "tool_call_id": CALL["id"], "content": RESULT}]
    second = _post_raw(port, {"messages": messages, "tools": [TOOL], "temperature": 0,
                              "max_tokens": max_tokens})
    seconds = time.perf_counter() - t0
    answer = second["choices"][0]["message"]
    again = "".join(f"\n(called {c['function']['name']}({c['function']['arguments']}) again)"
                    for c in answer.get("tool_calls") or [])
    tokens = [r["usage"]["completion_tokens"] for r in (first, second)]
    return {"seconds": seconds, "called": called, "tokens": tokens,
            "answer": (answer.get("content") or "") + again}


def _named(call: dict[str, Any]) -> tuple[str, Any]:
    return call["function"]["name"], json.loads(call["function"]["arguments"])


def _post_raw(port: int, body: dict[str, Any]) -> dict[str, Any]:
    """The whole JSON answer (``client.post`` keeps only the text)."""
    answer: dict[str, Any] = client.post_json(port, "/v1/chat/completions", body, timeout=900)
    return answer


def _server(mode: str, args: argparse.Namespace, model: Path) -> tuple[Any, int]:
    port = free_port()
    threads = args.threads or os.cpu_count() or 1
    if mode in DUET_MODES:
        cmd = [sys.executable, "-m", "engine", "serve", "--model", str(model),
               "--port", str(port), "--ctx", str(args.ctx), "--threads", str(threads),
               "--gpu-layers", str(args.gpu_layers), *DUET_MODES[mode]]
    else:
        cmd = [str(args.llama_server), "-m", str(model), "-t", str(threads), "-c", str(args.ctx),
               "-np", "1", "-ngl", ngl(args.gpu_layers), "--jinja", "--host", "127.0.0.1", "--port", str(port),
               "--no-webui", *LLAMA_MODES[mode]]
    return start_server(cmd, port, mode, timeout_s=300), port


@contextmanager
def _warm_server(mode: str, args: argparse.Namespace, model: Path) -> Iterator[int]:
    """A fresh server for ``mode``, after one warm-up request; yields its port."""
    proc, port = _server(mode, args, model)
    with proc:
        _post_raw(port, {"messages": [{"role": "user", "content": WARM_UP}], "max_tokens": 8})
        yield port


def _valid(text: str) -> bool:
    import jsonschema  # lazy: a test dependency, needed only to check an extraction

    try:
        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def run(args: argparse.Namespace) -> int:

    model = resolve_model(args.model)
    body = extraction_body(args.max_tokens)
    wanted = args.modes.split(",") if args.modes else [*DUET_MODES, *LLAMA_MODES]
    modes = [m for m in wanted if m in DUET_MODES or (m in LLAMA_MODES and args.llama_server)]
    parts = set(args.parts.split(","))
    if not parts <= {"extraction", "tool"}:
        raise client.Failed(f"unknown parts: {args.parts} (extraction, tool)")
    runs: dict[str, dict[str, list]] = {m: {"tps": [], "gen_s": [], "n": [], "texts": [], "turns": []}
                                       for m in modes}
    for _ in range(args.repeats):  # the modes in turns: the machine's drift is shared by all
        for mode in modes:
            if "extraction" in parts:
                with _warm_server(mode, args, model) as port:
                    r = _post_raw(port, body)
                    timings = r.get("timings") or {}
                    runs[mode]["tps"].append(float(timings.get("predicted_per_second", 0.0)))
                    runs[mode]["gen_s"].append(float(timings.get("predicted_ms", 0.0)) / 1000)
                    runs[mode]["n"].append(int(r["usage"]["completion_tokens"]))
                    runs[mode]["texts"].append(r["choices"][0]["message"].get("content") or "")
            if "tool" in parts:
                with _warm_server(mode, args, model) as port:  # the tool turn on its own fresh server
                    runs[mode]["turns"].append(tool_turn(port, 200))
    rows: dict[str, dict[str, Any]] = {}
    for mode in modes:
        tps, texts, turns = runs[mode]["tps"], runs[mode]["texts"], runs[mode]["turns"]
        gen_s = runs[mode]["gen_s"]
        rows[mode] = {"tps": statistics.median(tps) if tps else None, "tps_runs": tps,
                      "gen_s": statistics.median(gen_s) if gen_s else None, "gen_runs": gen_s,
                      "n": runs[mode]["n"][-1] if gen_s else None,
                      "tool_runs": [t["seconds"] for t in turns],
                      "valid": all(_valid(t) for t in texts), "text": texts[-1] if texts else "",
                      "tool_s": statistics.median(t["seconds"] for t in turns) if turns else None,
                      "called": all(t["called"] for t in turns),
                      "tokens": turns[-1]["tokens"] if turns else [],
                      "answer": turns[-1]["answer"] if turns else ""}
        log.info("%s: extraction %s tok/s, tool turn %s s", mode, rows[mode]["tps"], rows[mode]["tool_s"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(rows, args), encoding="utf-8")
    print(args.out)
    return 0


def markdown(rows: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    plain = rows.get("duet-plain", {}).get("text")
    lines = ["# Structured output and tool calls", "",
             f"`python -m bench structured --max-tokens {args.max_tokens} --repeats {args.repeats}"
             + (f" --gpu-layers {args.gpu_layers}" if args.gpu_layers else "")
             + (" --llama-server PATH`" if args.llama_server else "`"), "", args.note, "",
             f"Extraction: the functions of `{MODULE}` (from `{START}` on) as a JSON schema'd list; "
             "tool turn: the request with the tool, then the conversation sent back with the call and its "
             "result (the same second body to every server), wall time of both requests.", "",
             "| mode | extraction tok/s (each run) | extraction, s to the object (each run) | its tokens "
             "| valid JSON | same text as duet-plain | tool turn, s (each run) "
             "| tokens (call, answer) | first reply parsed as the call |",
             "|---|---|---|---|---|---|---|---|---|"]
    for mode, r in rows.items():
        same = "–" if plain is None else ("yes" if r["text"] == plain else "no")
        tps = "–" if r["tps"] is None else f"{r['tps']:.2f} ({_each(r['tps_runs'])})"
        tool = "–" if r["tool_s"] is None else f"{r['tool_s']:.2f} ({_each(r['tool_runs'])})"
        gen = "–" if r["gen_s"] is None else f"{r['gen_s']:.2f} ({_each(r['gen_runs'])})"
        lines.append(f"| {mode} | {tps} | {gen} | {r['n'] or '–'} | {'yes' if r['valid'] else 'no'} "
                     f"| {same} | {tool} | "
                     f"{', '.join(map(str, r['tokens'])) or '–'} | {'yes' if r['called'] else 'no'} |")
    lines += ["", *_ratios(rows)]
    for mode, r in rows.items():
        lines += ["", f"<details><summary>{mode}: the extraction and the tool turn's answer</summary>", "",
                  "```", r["text"], "```", "", "```", r["answer"], "```", "</details>"]
    return "\n".join(lines) + "\n"


def _each(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _ratios(rows: dict[str, dict[str, Any]]) -> list[str]:
    """Duet's best mode against llama-server's best, for each part both sides ran."""
    def best(side: str, key: str, pick: Any) -> tuple[str, float] | None:
        found = [(m, r[key]) for m, r in rows.items() if m.startswith(side) and r[key] is not None]
        return pick(found, key=lambda mr: mr[1]) if found else None

    out = []
    duet, server = best("duet", "tps", max), best("server", "tps", max)
    if duet and server:
        out.append(f"Extraction: {duet[0]} {duet[1] / server[1]:.2f}× {server[0]} (tok/s).")
    duet, server = best("duet", "gen_s", min), best("server", "gen_s", min)
    if duet and server:
        out.append(f"Extraction: {duet[0]} {server[1] / duet[1]:.2f}× {server[0]} "
                   "(inverse of the time to the object).")
    duet, server = best("duet", "tool_s", min), best("server", "tool_s", min)
    if duet and server:
        out.append(f"Tool turn: {duet[0]} {server[1] / duet[1]:.2f}× {server[0]} (inverse of wall time).")
    return out
