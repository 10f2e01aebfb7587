"""Open WebUI's chat export (Settings → Chats → Export, or a chat's Download → Export chat
(.json)): a list of chats.

Fields relied on: ``id``, ``title``, ``created_at`` / ``updated_at`` (epoch seconds) and
``chat``: ``{title, models, system | params.system, history: {currentId, messages: id →
{id, parentId, childrenIds, role, content, timestamp, model, files}}, messages}``. A bare
``chat`` object (no wrapper) is read too.

``history`` is the tree (regenerated replies and edited questions are children of one message):
the branch that leads to ``currentId`` is the one shown. Without a history the flat
``messages`` list is read as a linear chat. The chat's system prompt becomes its first message.
Files and images (``files``) become a visible placeholder naming the file: the export does not
carry their contents.
"""

from __future__ import annotations

from typing import Any

from engine.conversation.importers.base import (
    Entry,
    Imported,
    bounded,
    build_tree,
    chain,
    epoch,
    join,
    make_turn,
    missing,
    need,
    opt_str,
)
from engine.conversation.tree import NEW_TITLE, Node

NAME = "openwebui"
LABEL = "Open WebUI"


def _chat(record: Any) -> dict[str, Any] | None:
    if not isinstance(record, dict):
        return None
    chat = record.get("chat", record)
    if isinstance(chat, dict) and isinstance(chat.get("history"), dict) and \
            isinstance(chat["history"].get("messages"), dict):
        return chat
    return None


def sniff(record: Any) -> bool:
    return _chat(record) is not None


def read(record: dict[str, Any]) -> Imported:
    chat = _chat(record)
    assert chat is not None  # sniffed
    history = chat["history"]
    entries: dict[str, Entry] = {}
    models: list[str] = []
    for key, m in bounded(history["messages"], dict, "history.messages").items():
        where = f"message {key[:40]!r}"
        m = need(m, dict, where)
        when = epoch(m.get("timestamp"), f"{where}.timestamp")
        role = need(m.get("role"), str, f"{where}.role")
        text = need(m.get("content") or "", str, f"{where}.content")
        files = [missing(_file_name(f), "image" if isinstance(f, dict) and f.get("type") == "image"
                         else "file") for f in need(m.get("files") or [], list, f"{where}.files")]
        if role == "assistant" and isinstance(m.get("model"), str):
            models.append(m["model"])
        entries[key] = Entry(opt_str(m.get("parentId"), f"{where}.parentId"),
                             need(m.get("childrenIds") or [], list, f"{where}.childrenIds"),
                             make_turn(role, join(text, *files), when), when or 0.0)
    root = build_tree(entries, opt_str(history.get("currentId"), "history.currentId"))
    times = [e.order for e in entries.values() if e.order]
    system = chat.get("system")
    params = chat.get("params")
    if not system and isinstance(params, dict):
        system = params.get("system")
    if isinstance(system, str) and system.strip():
        root = _under_system(root, make_turn("system", system.strip(), min(times, default=None)))
    wrapper = record if record is not chat else {}
    created = epoch(wrapper.get("created_at", chat.get("timestamp")), "created_at")
    created = created if created is not None else min(times, default=0.0)
    updated = epoch(wrapper.get("updated_at"), "updated_at")
    title = opt_str(wrapper.get("title"), "title") or opt_str(chat.get("title"), "chat.title")
    return Imported(NAME, title or NEW_TITLE, root, created,
                    updated if updated is not None else max(times, default=created),
                    opt_str(wrapper.get("id", chat.get("id")), "id"),
                    models[-1][:200] if models else None)


def _under_system(root: Node, system: Any) -> Node:
    """``root``'s first messages hung under a first message ``system``."""
    top = chain([system])
    node = top.children[0]
    node.children, node.chosen = root.children, root.chosen
    for child in node.children:
        child.parent = node
    return top


def _file_name(f: Any) -> str:
    if not isinstance(f, dict):
        return "unnamed"
    for key in ("name", "filename", "id"):
        if isinstance(f.get(key), str) and not f[key].startswith("data:"):
            return f[key][:200]
    inner = f.get("file")
    if isinstance(inner, dict) and isinstance(inner.get("filename"), str):
        return inner["filename"][:200]
    return "image" if f.get("type") == "image" else "unnamed"
