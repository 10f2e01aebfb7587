"""``duet-cli generate --mcp-config FILE``: the model may call the tools of the MCP servers listed
in FILE (the ``mcpServers`` JSON of Claude Desktop, Cursor, LM Studio and Jan). A call runs only
when its tool is named with ``--allow-tool``; any other call is refused and the model is told
so. The calls and their results go to standard error (standard output keeps the answer), or
into the object ``--json`` prints."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.chat.messages import Message, ToolCall
from engine.decode.sampling import SamplingParams
from engine.errors import DuetError
from engine.events import Done, done_json
from engine.mcp.config import McpConfig
from engine.mcp.host import ToolHost
from engine.mcp.interchange import read_servers
from engine.mcp.offer import offer
from engine.runtime.tool_rounds import CallAnswered, RoundsDone, Text, tool_rounds
from engine.tools import NAME, ToolChoice

SHOWN_RESULT = 200  # characters of a result shown on standard error


def choice_from(text: str) -> ToolChoice:
    """The first reply's choice; a forced one is one call (the next replies choose freely)."""
    if text in ("auto", "none"):
        return ToolChoice(text)  # type: ignore[arg-type]
    if text == "required":
        return ToolChoice("required", parallel=False)
    if not NAME.match(text):
        raise DuetError(f"--tool-choice: {text!r} is not auto, required, none or a tool's name")
    return ToolChoice("function", text, parallel=False)


def allowed(patterns: Sequence[str], call: ToolCall, where: tuple[str, str] | None) -> bool:
    """Whether ``call`` (of ``where``: server, tool) is named by ``--allow-tool``."""
    names = {call.name} | (set() if where is None else {where[1], f"{where[0]}/{where[1]}"})
    return "*" in patterns or bool(names & set(patterns))


def readable(call: ToolCall) -> str:
    """``name(key=value, ...)``, values as JSON."""
    args = call.parsed_arguments()
    if not isinstance(args, dict):
        return f"{call.name}({call.arguments})"
    return f"{call.name}(" + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}"
                                        for k, v in args.items()) + ")"


def start_host(path: Path, host: ToolHost) -> None:
    """Start the servers of ``path`` and wait until each is ready or failed (a failed one is
    reported on standard error; the others serve)."""
    servers = read_servers(path, enabled=True)
    if not servers:
        raise DuetError(f"{path.name} lists no MCP servers")
    host.apply(McpConfig(servers)).result(timeout=host.limits.start_timeout + 5)
    for s in servers:
        status = host.wait_for(s.name, ("ready", "failed"), host.limits.start_timeout)
        if status.state != "ready":
            print(f"duet-cli: tool server {s.name}: {status.reason or status.state}", file=sys.stderr)


def generate(rt: Any, args: argparse.Namespace, messages: list[Message], sampling: SamplingParams) -> int:
    choice = choice_from(args.tool_choice)
    if args.max_tool_rounds < 0:
        raise DuetError("--max-tool-rounds must be 0 or more")
    with ToolHost() as host:
        start_host(args.mcp_config, host)
        tools = offer(host)
        if not tools.tools:
            print("duet-cli: no tools are ready; the model answers without them", file=sys.stderr)
        if choice.mode == "function" and choice.name not in {t.name for t in tools.tools}:
            raise DuetError(f"--tool-choice: no ready tool is named {choice.name!r}")
        box = host.toolbox()

        def ask(call: ToolCall) -> bool:
            return allowed(args.allow_tool, call, box.resolve(call.name))

        calls: list[dict[str, Any]] = []
        replies: list[Done] = []
        for ev in tool_rounds(rt.generator, messages, tools, sampling, ask=ask, choice=choice,
                              max_rounds=args.max_tool_rounds):
            if isinstance(ev, Text) and not args.json:
                sys.stdout.write(ev.text)
                sys.stdout.flush()
            elif isinstance(ev, Done):
                replies.append(ev)
            elif isinstance(ev, CallAnswered):
                calls.append(_call_json(ev))
                if not args.json:
                    _report(ev)
            elif isinstance(ev, RoundsDone):
                if args.json:
                    out = done_json(ev.done)
                    out["text"] = ev.messages[-1].content
                    out["tool_calls"] = calls
                    out["replies"] = ev.replies
                    print(json.dumps(out))
                else:
                    sys.stdout.write("\n")
    return 0


def _call_json(ev: CallAnswered) -> dict[str, Any]:
    return {"name": ev.call.name, "arguments": ev.call.parsed_arguments(), "allowed": ev.allowed,
            "result": ev.result.text, "is_error": ev.result.is_error,
            "truncated": ev.result.truncated}


def _report(ev: CallAnswered) -> None:
    shown = ev.result.text if len(ev.result.text) <= SHOWN_RESULT else ev.result.text[:SHOWN_RESULT] + "…"
    shown = shown.replace("\n", " ")
    verdict = "" if ev.allowed else " refused (not named by --allow-tool)"
    line = f"[tool] {readable(ev.call)}{verdict}" + (f" → {shown}" if ev.allowed else "")
    print(line, file=sys.stderr, flush=True)
