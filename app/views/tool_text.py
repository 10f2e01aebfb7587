"""A tool call in words: ``get_time(timezone: Asia/Tokyo)`` rather than raw JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence

from engine.chat.messages import ToolCall

ARGUMENT_CHARS = 200  # an argument's value is cut at this length in the summary line


def _value(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= ARGUMENT_CHARS else text[:ARGUMENT_CHARS - 1] + "…"


def arguments_text(call: ToolCall) -> str:
    """``key: value, key: value`` of a call's JSON object (its raw text when it is not one)."""
    args = call.parsed_arguments()
    if isinstance(args, dict):
        return ", ".join(f"{k}: {_value(v)}" for k, v in args.items())
    return _value(call.arguments)


def call_line(call: ToolCall) -> str:
    args = arguments_text(call)
    return f"{call.name}({args})" if args else f"{call.name}()"


def calls_text(calls: Sequence[ToolCall]) -> str:
    """What a reply's calls show under its text, one per line."""
    return "\n".join(f"→ calls {call_line(c)}" for c in calls)
