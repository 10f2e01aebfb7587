"""Claude's data export: ``conversations.json``, a list of conversations.

Fields relied on: ``uuid``, ``name``, ``created_at`` / ``updated_at`` (ISO 8601) and
``chat_messages``: ``{uuid, sender: human | assistant, text, content: [{type, text, ...}],
created_at, attachments: [{file_name, extracted_content}], files: [{file_name}],
parent_message_uuid}``.

The message's ``content`` blocks are read when present (``text`` blocks; ``thinking`` in a
``<think>`` section; a tool's use and result as a line naming it), ``text`` otherwise. An
attachment whose text the export carries (``extracted_content``) stays attached to its message
with that text; files it does not carry (images, ``files``) become a visible placeholder naming
the file. Where messages name their parent (``parent_message_uuid``), edits and retries become
versions and the branch of the last message is the one shown; otherwise the chat is linear.
"""

from __future__ import annotations

import hashlib
from typing import Any

from engine.chat.messages import Attachment
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

NAME = "claude"
LABEL = "Claude"
ROOT = "00000000-0000-4000-8000-000000000000"  # the parent Claude names for a first message
SENDERS = {"human": "user", "assistant": "assistant"}


def sniff(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("chat_messages"), list)


def read(record: dict[str, Any]) -> Imported:
    messages = bounded(record.get("chat_messages"), list, "chat_messages")
    entries: dict[str, Entry] = {}
    last: str | None = None
    for i, m in enumerate(messages):
        where = f"chat_messages[{i}]"
        m = need(m, dict, where)
        key = opt_str(m.get("uuid"), f"{where}.uuid") or f"#{i}"
        sender = need(m.get("sender"), str, f"{where}.sender")
        if sender not in SENDERS:
            raise fail(f"{where} has the unknown sender {sender[:40]!r}")
        when = epoch(m.get("created_at"), f"{where}.created_at")
        files = _attachments(m, where)
        text = join(_text(m, where), *(missing(n) for n in _files(m, where)))
        parent = opt_str(m.get("parent_message_uuid"), f"{where}.parent_message_uuid")
        if parent is None and "parent_message_uuid" not in m:
            parent = last  # an older export: the messages in order
        entries[key] = Entry(None if parent == ROOT else parent, (),
                             make_turn(SENDERS[sender], text, when, attachments=files), when or i)
        last = key
    root = build_tree(entries, last)
    created = epoch(record.get("created_at"), "created_at") or 0.0
    updated = epoch(record.get("updated_at"), "updated_at")
    return Imported(NAME, opt_str(record.get("name"), "name") or NEW_TITLE, root, created,
                    updated if updated is not None else created,
                    opt_str(record.get("uuid"), "uuid"))


def _text(m: dict[str, Any], where: str) -> str:
    blocks = m.get("content")
    if not blocks:
        return opt_str(m.get("text"), f"{where}.text") or ""
    out = []
    for j, b in enumerate(need(blocks, list, f"{where}.content")):
        b = need(b, dict, f"{where}.content[{j}]")
        kind = b.get("type")
        if kind == "text":
            out.append(need(b.get("text", ""), str, f"{where}.content[{j}].text"))
        elif kind == "thinking" and isinstance(b.get("thinking"), str):
            out.append(f"<think>\n{b['thinking']}\n</think>")
        elif kind == "tool_use":
            out.append(f"[used the tool {str(b.get('name', 'unknown'))[:80]}]")
        elif kind == "tool_result":
            out.append(f"[the result of the tool {str(b.get('name', 'unknown'))[:80]}]")
    return join(*out)


def _attachments(m: dict[str, Any], where: str) -> tuple[Attachment, ...]:
    out = []
    for j, a in enumerate(need(m.get("attachments") or [], list, f"{where}.attachments")):
        a = need(a, dict, f"{where}.attachments[{j}]")
        text = a.get("extracted_content")
        name = opt_str(a.get("file_name"), f"{where}.attachments[{j}].file_name") or "unnamed"
        if isinstance(text, str):
            sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            out.append(Attachment(name[:200], "text", sha, text, (), "auto"))
    return tuple(out[:64])


def _files(m: dict[str, Any], where: str) -> list[str]:
    names = []
    for j, f in enumerate(need(m.get("files") or [], list, f"{where}.files")):
        f = need(f, dict, f"{where}.files[{j}]")
        names.append(str(f.get("file_name") or f.get("file_uuid") or "unnamed")[:200])
    for a in m.get("attachments") or []:
        if isinstance(a, dict) and not isinstance(a.get("extracted_content"), str):
            names.append(str(a.get("file_name") or "unnamed")[:200])
    return names
