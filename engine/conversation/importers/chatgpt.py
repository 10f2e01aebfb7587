"""ChatGPT's data export: ``conversations.json`` (in the export's zip, or loose), a list of
conversations.

Fields relied on: ``title``, ``create_time`` / ``update_time`` (epoch seconds), ``id`` or
``conversation_id``, ``current_node`` and ``mapping``: node id → ``{parent, children,
message}``, where ``message`` is null (the root) or ``{author: {role, name}, create_time,
content: {content_type, parts | text | result}, recipient, metadata}``.

Branches (an edited question, a regenerated answer) are children of one node: they become
versions, and the branch that leads to ``current_node`` is the one shown. System messages stay
system messages (an empty one, as ChatGPT starts every chat with, is dropped); hidden ones
(``metadata.is_visually_hidden_from_conversation``, custom instructions) become system
messages when they hold text. An assistant message addressed to a tool (``recipient`` not
``all``) becomes a tool call, a ``tool`` message its result; an empty question or reply
(a reasoning recap, a reply stopped before it began) is dropped, the reasoning itself
(``thoughts``) kept in a ``<think>`` section. Images and files the export does
not carry (``image_asset_pointer`` parts, ``metadata.attachments``) become a visible
placeholder naming the file.
"""

from __future__ import annotations

import json
from typing import Any

from engine.chat.messages import ToolCall
from engine.conversation.importers.base import (
    Entry,
    Imported,
    bounded,
    build_tree,
    epoch,
    fail,
    join,
    link_tools,
    make_turn,
    missing,
    need,
    opt_str,
)
from engine.conversation.tree import NEW_TITLE, Turn

NAME = "chatgpt"
LABEL = "ChatGPT"


def sniff(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("mapping"), dict)


def read(record: dict[str, Any]) -> Imported:
    mapping = bounded(record.get("mapping"), dict, "mapping")
    entries: dict[str, Entry] = {}
    models: list[str] = []
    for key, node in mapping.items():
        where = f"mapping node {key[:40]!r}"
        node = need(node, dict, where)
        children = need(node.get("children", []), list, f"{where}.children")
        parent = opt_str(node.get("parent"), f"{where}.parent")
        message = node.get("message")
        turn, when = (None, 0.0) if message is None else _turn(need(message, dict, where), where, key)
        if turn is not None and turn.role == "assistant":
            meta = message.get("metadata")
            slug = meta.get("model_slug") if isinstance(meta, dict) else None
            if isinstance(slug, str) and slug:
                models.append(slug)
        entries[key] = Entry(parent, children, turn, when or 0.0)
    current = opt_str(record.get("current_node"), "current_node")
    root = build_tree(entries, current)
    link_tools(root)
    created = epoch(record.get("create_time"), "create_time")
    updated = epoch(record.get("update_time"), "update_time")
    times = [e.order for e in entries.values() if e.turn is not None and e.order]
    created = created if created is not None else min(times, default=0.0)
    cid = record.get("conversation_id", record.get("id"))
    return Imported(NAME, opt_str(record.get("title"), "title") or NEW_TITLE, root, created,
                    updated if updated is not None else max(times, default=created),
                    opt_str(cid, "id"), models[-1][:200] if models else None)


def _turn(message: dict[str, Any], where: str, key: str) -> tuple[Turn | None, float | None]:
    author = need(message.get("author"), dict, f"{where}.author")
    role = need(author.get("role"), str, f"{where}.author.role")
    when = epoch(message.get("create_time"), f"{where}.create_time")
    content = need(message.get("content", {}), dict, f"{where}.content")
    meta = message.get("metadata") or {}
    meta = need(meta, dict, f"{where}.metadata")
    text = join(_text(content, where), *_attachments(meta, where))
    hidden = bool(meta.get("is_visually_hidden_from_conversation")) or \
        content.get("content_type") == "user_editable_context"
    if role not in ("system", "user", "assistant", "tool"):
        raise fail(f"{where} has the unknown role {role[:40]!r}")
    if hidden or role == "system":
        return (make_turn("system", text, when) if text.strip() else None), when
    recipient = message.get("recipient", "all")
    if role == "assistant" and isinstance(recipient, str) and recipient not in ("all", ""):
        call = ToolCall(key[:200] or "call", recipient[:200],
                        json.dumps({"input": text}, ensure_ascii=False))
        return make_turn("assistant", "", when, tool_calls=(call,)), when
    if role == "tool":
        name = opt_str(author.get("name"), f"{where}.author.name")
        return make_turn("tool", text, when, name=(name or "tool")[:200]), when
    if not text.strip():  # nothing to show (a reasoning recap, a cancelled reply)
        return None, when
    return make_turn(role, text, when), when


def _text(content: dict[str, Any], where: str) -> str:
    kind = content.get("content_type")
    if kind == "user_editable_context":
        return join(*(v for k in ("user_profile", "user_instructions")
                      if isinstance(v := content.get(k), str)))
    if kind == "thoughts":
        thoughts = need(content.get("thoughts", []), list, f"{where}.content.thoughts")
        body = "\n\n".join(t["content"] for t in thoughts
                           if isinstance(t, dict) and isinstance(t.get("content"), str))
        return f"<think>\n{body}\n</think>" if body else ""
    if "parts" in content:
        parts = need(content["parts"], list, f"{where}.content.parts")
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                out.append(_part(part))
            elif part is not None:
                raise fail(f"{where}.content.parts holds a {type(part).__name__}")
        return join(*out)
    for key in ("text", "result"):
        if isinstance(content.get(key), str):
            return content[key]
    return ""


def _part(part: dict[str, Any]) -> str:
    """A part that is not text: an image or file the export names but does not carry."""
    if isinstance(part.get("text"), str):
        return part["text"]
    pointer = part.get("asset_pointer")
    if isinstance(pointer, str):
        kind = "image" if "image" in str(part.get("content_type", "image")) else "file"
        return missing(pointer.rsplit("/", 1)[-1], kind)
    return missing(str(part.get("content_type", "part"))[:80], "content")


def _attachments(meta: dict[str, Any], where: str) -> list[str]:
    files = meta.get("attachments") or []
    files = need(files, list, f"{where}.metadata.attachments")
    return [missing(str(f.get("name") or f.get("id") or "unnamed")[:200]) for f in files
            if isinstance(f, dict)]
