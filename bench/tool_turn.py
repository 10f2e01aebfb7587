"""``python -m bench tool-turn``: how soon the answer after a tool result starts, against a
normal turn's, on the same model and context (medians over ``--repeats``).

* **tool**: a question whose first reply is a call of the published MCP time server's
  ``get_current_time`` (mcp-server-time, over stdio, through the tool host and
  engine.runtime.tool_rounds; forced, so the scenario does not hang on a greedy choice: the 1.5B chose
  ``convert_time`` on one build, whose result is three times longer); from the moment
  the server's result is there to the first token of the answer that follows it. The call's
  re-rendering is read while the call runs (engine.runtime.tool_rounds), so the answer reads the result
  and what closes it; a read-ahead that outlasts the call is waited for, and counted.
  ``--ask-after S``: the person answers the call S seconds after it is put (the window asks;
  0, the default, is the command line's ``--allow-tool``).
* **turn**: the same question answered in text, then a follow-up question; from the follow-up's
  request to its first token (the new message is new to the context).

Both show the tools in the prompt (as a chat with tools on does). The wall time to the first
token is the figure; the engine's prompt clock (``Stats.prompt_s``) and the tokens new to the
context are reported beside it. Target (issue 25): tool ≤ 1.5 × turn. Writes
``OUT/tool_turn.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.events import Done, Token
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model
from engine.mcp import McpConfig, ServerConfig, ToolHost
from engine.mcp.offer import offer
from engine.runtime.generate import Generator
from engine.runtime.runtime import resolve_model
from engine.runtime.tool_rounds import ToolOffer, tool_rounds
from engine.tools import ToolChoice
from engine.tools.prompting import tool_prompt

QUESTION = "What time is it in Tokyo right now?"
FOLLOW_UP = "And what is the time difference between Tokyo and Paris?"
TARGET = 1.5


def add_parser(bench_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = bench_subparsers.add_parser("tool-turn", help="the answer after a tool result: time to first token")
    p.add_argument("--model", default="target", help="GGUF path or starter key (default: target)")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--reply-tokens", type=int, default=96,
                   help="tokens of each reply (the forced call, written as pretty JSON, must fit)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: one per core)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--ask-after", type=float, default=0.0,
                   help="seconds the person takes to allow the call (0: allowed at once)")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)
    return p


def _time_server() -> str:
    path = Path(sys.executable).parent / "mcp-server-time"
    found = str(path) if path.exists() else shutil.which("mcp-server-time")
    if found is None:
        raise SystemExit("mcp-server-time is not installed (pip install mcp-server-time)")
    return found


def _allow(after_s: float) -> bool:
    time.sleep(after_s)  # the person reading the call before allowing it
    return True


class Clocked:
    """A generator that notes when each reply's first token came (``first``)."""

    def __init__(self, gen: Any) -> None:
        self.gen, self.model, self.ctx = gen, gen.model, gen.ctx
        self.first: list[float] = []

    def complete(self, prompt: Any, params: Any, cancel: Any = None, **kw: Any) -> Iterator[Any]:

        seen = False
        for ev in self.gen.complete(prompt, params, cancel, **kw):
            if isinstance(ev, Token) and not seen:
                seen = True
                self.first.append(time.perf_counter())
            yield ev

    def read_ahead(self, tokens: Any, cancel: Any = None) -> int:
        return self.gen.read_ahead(tokens, cancel)


def run(args: argparse.Namespace) -> int:

    params = SamplingParams(temperature=0.0, max_tokens=args.reply_tokens)
    model = Model(resolve_model(args.model))
    rows: dict[str, list[float]] = {"tool": [], "turn": []}
    prompt_s: dict[str, list[float]] = {"tool": [], "turn": []}
    new_tokens: dict[str, list[int]] = {"tool": [], "turn": []}
    with ToolHost() as host, LlamaSequence(model, ContextParams(n_ctx=args.ctx, n_threads=args.threads)) as ctx:
        host.apply(McpConfig((ServerConfig.stdio("time", _time_server(), ["--local-timezone", "UTC"]),)))
        if host.wait_for("time", ("ready", "failed"), 60).state != "ready":
            raise SystemExit(f"the time server did not start: {host.status('time').reason}")
        tools = offer(host)
        results: list[float] = []  # when each result was there

        def run_call(call: Any, cancel: Any) -> Any:
            result = tools.run(call, cancel)
            results.append(time.perf_counter())
            return result
        clocked = ToolOffer(tools.tools, run_call)
        gen = Clocked(Generator.alone(ctx))
        for _ in range(args.repeats):
            ctx.clear()
            gen.first.clear()
            results.clear()
            dones = [e for e in tool_rounds(gen, [Message("user", QUESTION)], clocked, params,
                                            ask=lambda call: _allow(args.ask_after), max_rounds=1,
                                            choice=ToolChoice("function", "get_current_time",
                                                              parallel=False))
                     if isinstance(e, Done)]
            answer = dones[1].stats
            rows["tool"].append(gen.first[1] - results[0])
            prompt_s["tool"].append(answer.prompt_s)
            new_tokens["tool"].append(answer.n_prompt_tokens - answer.n_cached_tokens)

            ctx.clear()
            gen.first.clear()
            first = [Message("user", QUESTION)]
            prompt, _ = tool_prompt(model, first, tools.tools)
            reply = [e for e in gen.complete(prompt, params) if isinstance(e, Done)][0]
            prompt, _ = tool_prompt(model, first + [Message("assistant", reply.text),
                                                    Message("user", FOLLOW_UP)], tools.tools)
            asked = time.perf_counter()
            follow = [e for e in gen.complete(prompt, params) if isinstance(e, Done)][0].stats
            rows["turn"].append(gen.first[1] - asked)
            prompt_s["turn"].append(follow.prompt_s)
            new_tokens["turn"].append(follow.n_prompt_tokens - follow.n_cached_tokens)
    result: dict[str, Any] = {k: {"first_token_s_median": statistics.median(v), "first_token_s": v,
                                  "prompt_s_median": statistics.median(prompt_s[k]),
                                  "new_tokens_median": statistics.median(new_tokens[k])}
                              for k, v in rows.items()}
    ratio = result["tool"]["first_token_s_median"] / result["turn"]["first_token_s_median"]
    result.update(model=model.display_name, ratio=ratio, target=TARGET, repeats=args.repeats,
                  ask_after_s=args.ask_after)
    print(f"{'':6} {'first token (s)':>16} {'prompt read (s)':>16} {'new tokens':>11}")
    for k in rows:
        r = result[k]
        print(f"{k:6} {r['first_token_s_median']:16.3f} {r['prompt_s_median']:16.3f} "
              f"{r['new_tokens_median']:11.0f}")
    print(f"tool / turn = {ratio:.2f} (target ≤ {TARGET})")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tool_turn.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0
