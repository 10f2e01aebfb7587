"""Taking a conversation out: the path shown as Markdown, or the whole tree as JSON; and
finding an opened conversation by its title or text (the saved ones: search_index). No Qt.

A tool's result is untrusted text: in Markdown it sits in a fenced block whose fence is longer
than any run of backticks in it, so it cannot end the block and pass for the conversation.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.chat.messages import Attachment, ToolCall
from engine.conversation.store import tree_to_json
from engine.conversation.tree import Conversation, Turn

ROLE_TITLES = {"system": "System", "user": "You", "assistant": "Assistant", "tool": "Tool"}
TOOL_ENDS = {"error": " — the tool failed", "denied": " — denied, not run",
             "cancelled": " — cancelled"}
_BACKTICKS = re.compile("`+")
_PLAIN_KEY = re.compile(r"[\w.-]+")


def to_markdown(conv: Conversation) -> str:
    """The branch shown, one section per message; code blocks stay as they were written."""
    lines = [f"# {conv.title}", ""]
    for turn in conv.turns:
        if turn.streaming:
            continue
        when = datetime.fromtimestamp(turn.time).strftime("%Y-%m-%d %H:%M")
        lines += [f"## {ROLE_TITLES.get(turn.role, turn.role)} · {when}", ""]
        if turn.role == "tool":
            lines += _tool_result(turn)
            continue
        if turn.text.strip() or not turn.tool_calls:
            lines += [turn.text.rstrip(), ""]
        for call in turn.tool_calls:
            lines += _tool_call(call)
        for a in turn.attachments:
            lines += _attachment(a)
    return "\n".join(lines)


def _attachment(a: Attachment) -> list[str]:
    """An attached file: its name and SHA-256, and its text in a fence nothing in it closes."""
    pages = f", {len(a.pages)} pages" if a.pages else ""
    return [f"**Attached:** {_code(a.name)} ({a.kind}{pages}, SHA-256 `{a.sha256}`)", "",
            *_fenced(a.text), ""]


def _tool_call(call: ToolCall) -> list[str]:
    """A call as one line, its arguments as ``key: value`` (a block when not a JSON object)."""
    head = f"**Tool call** {_code(call.name)}"
    args = call.parsed_arguments()
    if isinstance(args, dict):
        pairs = ", ".join(f"{k if _PLAIN_KEY.fullmatch(k) else json.dumps(k, ensure_ascii=False)}"
                          f": {json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
        return [f"{head} — {pairs}" if pairs else head, ""]
    return [head, "", *_fenced(call.arguments), ""]


def _tool_result(turn: Turn) -> list[str]:
    end = TOOL_ENDS.get(turn.reason or "", "")
    head = f"**Tool result** ({_code(turn.name or 'unknown')}){end}"
    return [head, "", *(_fenced(turn.text) if turn.text else []), ""]


def _fence(text: str, least: int) -> str:
    return "`" * max([least] + [len(run) + 1 for run in _BACKTICKS.findall(text)])


def _fenced(text: str) -> list[str]:
    """``text`` in a fenced code block that nothing in it can close."""
    fence = _fence(text, 3)
    return [fence, text.rstrip("\n"), fence]


def _code(text: str) -> str:
    """``text`` on one line as an inline code span that nothing in it can close."""
    text = " ".join(text.split())
    fence = _fence(text, 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def message_json(turn: Turn) -> dict[str, Any]:
    """A message in OpenAI's shape (tool calls and the call a result answers included)."""
    d: dict[str, Any] = {"role": turn.role, "content": turn.text, "time": turn.time}
    if turn.tool_calls:
        d["tool_calls"] = [{"id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments}}
                           for c in turn.tool_calls]
    if turn.tool_call_id is not None:
        d["tool_call_id"] = turn.tool_call_id
    if turn.name is not None:
        d["name"] = turn.name
    if turn.attachments:
        d["attachments"] = [{"name": a.name, "kind": a.kind, "sha256": a.sha256, "text": a.text,
                             "pages": list(a.pages), "mode": a.mode} for a in turn.attachments]
    return d


def to_json(conv: Conversation) -> str:
    """The whole conversation: the messages shown and the tree with every version."""
    data = {"app": "duet", "title": conv.title, "preset": conv.preset,
            "messages": [message_json(t) for t in conv.turns if not t.streaming],
            "tree": tree_to_json(conv)}
    return json.dumps(data, indent=2, ensure_ascii=False)


def export(conv: Conversation, path: Path) -> None:
    """Write ``conv`` to ``path``: JSON for a ``.json`` name, Markdown otherwise (OSError)."""
    text = to_json(conv) if path.suffix.lower() == ".json" else to_markdown(conv)
    path.write_text(text, encoding="utf-8")


def turn_texts(turn: Turn) -> list[str]:
    """What a search looks at in a message: its text, and its tool calls' names and arguments
    (each on its own, as search_index stores them)."""
    return [turn.text, *(s for c in turn.tool_calls for s in (c.name, c.arguments)),
            *(s for a in turn.attachments for s in (a.name, a.text))]


def matches(conv: Conversation, query: str) -> bool:
    """Whether ``query`` (case-insensitive) is in the title or in any version of any message
    (tool results, and the names and arguments of tool calls, included)."""
    q = query.casefold().strip()
    if not q or q in conv.title.casefold():
        return True
    return any(q in text.casefold() for node in conv.walk() for text in turn_texts(node.turn))
