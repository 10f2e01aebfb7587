"""Duet's own exports (engine.conversation.export), so that an export comes back: the JSON
(``{app: duet, title, messages, tree}``: every version, with the tree) and the Markdown (the
branch shown: ``# title``, then ``## You · 2025-01-31 14:05`` and the text of each message).

The JSON's tree is read as a ``.duet`` file's is (engine.conversation.store); one that does not
match its messages leaves the messages as a linear chat. The Markdown keeps what it shows: a
tool's result is read back from its fenced block, a tool call and an attached file stay as
the lines that show them.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from engine.chat.messages import Attachment, Message, ToolCall
from engine.conversation.export import ROLE_TITLES
from engine.conversation.importers.base import Imported, bounded, chain, fail, make_turn, need, opt_str
from engine.conversation.importers.records import Markdown
from engine.conversation.store import tree_from_json
from engine.conversation.tree import NEW_TITLE, Node, Turn

NAME = "duet"
LABEL = "Duet"
_ROLES = {v: k for k, v in ROLE_TITLES.items()}
_HEAD = re.compile(r"^## (" + "|".join(_ROLES) + r") · (\d{4}-\d{2}-\d{2} \d{2}:\d{2})$", re.M)
_FENCE = re.compile(r"^(`{3,})")
_RESULT = re.compile(r"^\*\*Tool result\*\* \((`+) ?(.*?) ?\1\)")


def sniff(record: Any) -> bool:
    return isinstance(record, Markdown) and _HEAD.search(record.text, 0) is not None or \
        isinstance(record, dict) and record.get("app") == "duet" and \
        isinstance(record.get("messages"), list)


def read(record: Any) -> Imported:
    return _markdown(record.text) if isinstance(record, Markdown) else _json(record)


def _json(record: dict[str, Any]) -> Imported:
    messages = [_message(m, f"messages[{i}]") for i, m in
                enumerate(bounded(record["messages"], list, "messages"))]
    root = tree_from_json(record.get("tree"), messages) or chain([Turn.of(m) for m in messages])
    times = [n.turn.time for n in _walk(root)]
    return Imported(NAME, opt_str(record.get("title"), "title") or NEW_TITLE, root,
                    min(times, default=0.0), max(times, default=0.0),
                    source_id=opt_str(record.get("file"), "file"),
                    project=opt_str(record.get("project"), "project"))


def _message(m: Any, where: str) -> Message:
    m = need(m, dict, where)
    role = need(m.get("role"), str, f"{where}.role")
    make_turn(role, "", None)  # checks the role
    when = m.get("time", 0.0)
    calls = []
    for c in need(m.get("tool_calls") or [], list, f"{where}.tool_calls"):
        f = need(need(c, dict, where).get("function"), dict, f"{where}.tool_calls.function")
        calls.append(ToolCall(need(c.get("id"), str, f"{where}.tool_calls.id"),
                              need(f.get("name"), str, f"{where}.tool_calls.name"),
                              need(f.get("arguments"), str, f"{where}.tool_calls.arguments")))
    files = []
    for a in need(m.get("attachments") or [], list, f"{where}.attachments"):
        a = need(a, dict, f"{where}.attachments")
        pages = tuple(p for p in need(a.get("pages") or [], list, "pages") if type(p) is int)
        files.append(Attachment(need(a.get("name"), str, "attachment name"),
                                need(a.get("kind"), str, "attachment kind"),
                                need(a.get("sha256"), str, "attachment sha256"),
                                need(a.get("text"), str, "attachment text"), pages,
                                a.get("mode") if a.get("mode") in ("whole", "retrieved") else "auto"))
    return Message(role, need(m.get("content"), str, f"{where}.content"),
                   float(need(when, (int, float), f"{where}.time")), tuple(calls),
                   opt_str(m.get("tool_call_id"), f"{where}.tool_call_id"),
                   opt_str(m.get("name"), f"{where}.name"), tuple(files))


def _walk(root: Node) -> list[Node]:
    out, stack = [], list(root.children)
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children)
    return out


def _markdown(text: str) -> Imported:
    lines = text.splitlines()
    title = NEW_TITLE
    if lines and lines[0].startswith("# "):
        title = lines[0][2:].strip() or NEW_TITLE
    sections: list[tuple[str, float, list[str]]] = []  # role, time, lines
    fence = ""
    for line in lines[1:]:
        if fence:
            if line.startswith(fence) and line.strip("`") == "":
                fence = ""
        elif (m := _FENCE.match(line)) is not None:
            fence = m.group(1)
        elif (h := _HEAD.match(line)) is not None:
            when = datetime.strptime(h.group(2), "%Y-%m-%d %H:%M").timestamp()
            sections.append((_ROLES[h.group(1)], when, []))
            continue
        if sections:
            sections[-1][2].append(line)
    if not sections:
        raise fail("it holds no messages of a Duet export")
    turns = [_turn(role, when, body) for role, when, body in sections]
    return Imported(NAME, title, chain(turns), turns[0].time, turns[-1].time)


def _turn(role: str, when: float, body: list[str]) -> Turn:
    while body and not body[-1].strip():
        body.pop()
    while body and not body[0].strip():
        body.pop(0)
    if role == "tool" and body and (m := _RESULT.match(body[0])) is not None:
        rest = body[2:] if len(body) > 1 and not body[1].strip() else body[1:]
        if len(rest) >= 2 and _FENCE.match(rest[0]) and rest[-1] == rest[0]:
            rest = rest[1:-1]
        return make_turn("tool", "\n".join(rest), when, name=m.group(2) or "tool")
    return make_turn(role, "\n".join(body), when)
