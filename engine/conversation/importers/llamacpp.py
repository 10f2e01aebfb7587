"""llama.cpp's web UI (``llama-server``'s chat): a conversation's Download (JSON), or the
export of all conversations (a list of them).

Fields relied on: ``conv: {id, name, lastModified, currNode}`` and ``messages``: ``{id,
convId, type: root | text, timestamp (ms), role, content, parent, children, model,
reasoningContent (older: thinking), toolCalls (the JSON text of OpenAI-style calls), toolCallId
(a tool result's), extra: [{type: textFile | pdfFile | context | mcpPrompt | mcpResource |
imageFile | audioFile | videoFile, name, content}]}`` (``ExportedConversation`` in the web
UI's ``types/database.ts``).

The ``root`` message (the tree's empty top) is dropped; a message's children are its versions,
and the branch that leads to ``currNode`` is the one shown. A reply's reasoning goes back into
a ``<think>`` section before its text. An attachment whose text the export carries
(``content``: a text file, a PDF's extracted text, pasted context, an MCP prompt or resource)
stays attached with that text; images, audio and video (data the model cannot read here) become
a visible placeholder naming the file. A reply's tool calls and the tool results that answer
them stay tool turns.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from engine.chat.messages import Attachment, ToolCall
from engine.conversation.importers.base import (
    Entry,
    Imported,
    bounded,
    build_tree,
    epoch,
    fail,
    join,
    make_turn,
    missing,
    need,
    opt_str,
)
from engine.conversation.tree import NEW_TITLE

NAME = "llamacpp"
LABEL = "llama.cpp web UI"


def sniff(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("conv"), dict) and \
        isinstance(record.get("messages"), list)


def read(record: dict[str, Any]) -> Imported:
    conv = record["conv"]
    entries: dict[str, Entry] = {}
    models: list[str] = []
    for i, m in enumerate(bounded(record["messages"], list, "messages")):
        where = f"messages[{i}]"
        m = need(m, dict, where)
        key = need(m.get("id"), (str, int), f"{where}.id")
        when = epoch(m.get("timestamp"), f"{where}.timestamp")
        parent = m.get("parent")
        parent = None if parent is None else str(need(parent, (str, int), f"{where}.parent"))
        children = [str(c) for c in need(m.get("children") or [], list, f"{where}.children")
                    if isinstance(c, (str, int))]
        if m.get("type") == "root":
            turn = None
        else:
            role = need(m.get("role"), str, f"{where}.role")
            text = need(m.get("content") or "", str, f"{where}.content")
            thinking = m.get("reasoningContent") or m.get("thinking")
            if isinstance(thinking, str) and thinking.strip():
                text = f"<think>\n{thinking}\n</think>\n\n{text}"
            files, absent = _extra(m.get("extra") or [], where)
            turn = make_turn(role, join(text, *absent), when, attachments=files,
                             tool_calls=_calls(m.get("toolCalls"), where),
                             tool_call_id=_short(m.get("toolCallId"), f"{where}.toolCallId"),
                             name="tool" if role == "tool" else None)
            if role == "assistant" and isinstance(m.get("model"), str):
                models.append(m["model"])
        entries[str(key)] = Entry(parent, children, turn, when or float(i))
    current = conv.get("currNode")
    root = build_tree(entries, None if current is None else str(current))
    times = [e.order for e in entries.values() if e.turn is not None]
    updated = epoch(conv.get("lastModified"), "conv.lastModified")
    created = min(times, default=updated or 0.0)
    cid = conv.get("id")
    return Imported(NAME, opt_str(conv.get("name"), "conv.name") or NEW_TITLE, root, created,
                    updated if updated is not None else max(times, default=created),
                    None if cid is None else str(need(cid, (str, int), "conv.id")),
                    models[-1][:200] if models else None)


def _extra(extra: Any, where: str) -> tuple[tuple[Attachment, ...], list[str]]:
    files, absent = [], []
    for k, x in enumerate(need(extra, list, f"{where}.extra")):
        x = need(x, dict, f"{where}.extra[{k}]")
        name = str(x.get("name") or x.get("type") or "unnamed")[:200]
        content = x.get("content")
        if isinstance(content, str):  # a text file, a PDF's text, context, an MCP prompt
            sha = hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()
            files.append(Attachment(name, "text", sha, content, (), "auto"))
        else:
            kind = next((k for k in ("image", "audio", "video") if k in str(x.get("type")).lower()),
                        "file")
            absent.append(missing(name, kind))
    return tuple(files[:64]), absent


def _calls(raw: Any, where: str) -> tuple[ToolCall, ...]:
    """``toolCalls``: the JSON text of the OpenAI-style calls an assistant message made."""
    if raw is None or raw == "":
        return ()
    try:
        calls = json.loads(need(raw, str, f"{where}.toolCalls"))
    except (ValueError, RecursionError):
        raise fail(f"{where}.toolCalls is not JSON") from None
    out = []
    for k, c in enumerate(need(calls, list, f"{where}.toolCalls")[:64]):
        c = need(c, dict, f"{where}.toolCalls[{k}]")
        f = need(c.get("function"), dict, f"{where}.toolCalls[{k}].function")
        args = f.get("arguments", "{}")
        out.append(ToolCall(_short(c.get("id"), "id") or f"call-{k}",
                            _short(f.get("name"), "name") or "tool",
                            args if isinstance(args, str) else json.dumps(args)))
    return tuple(out)


def _short(value: Any, where: str) -> str | None:
    """An id or a name: a string of at most 256 characters (None when absent)."""
    text = opt_str(value, where)
    return None if text is None else text[:256]
