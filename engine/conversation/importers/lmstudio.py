"""LM Studio's conversation file (``~/.lmstudio/conversations/<id>.conversation.json``).

Fields relied on: ``name``, ``createdAt`` (epoch milliseconds), ``systemPrompt``, and
``messages``: each ``{versions: [...], currentlySelected}``, a version being ``{type:
singleStep, role, content: [{type: text, text} | {type: file, name | fileIdentifier}]}`` or,
for a reply, ``{type: multiStep, role: assistant, steps: [{type: contentBlock, content: [...]}],
senderInfo: {senderName}}``.

The versions of a message become Duet's versions, ``currentlySelected`` the one shown; the
messages after it follow the selected one (LM Studio keeps one line of messages after the
versions). Files the conversation names (``type: file``) become a visible placeholder: the
conversation file does not carry them.
"""

from __future__ import annotations

from typing import Any

from engine.conversation.importers.base import (
    Imported,
    bounded,
    epoch,
    fail,
    join,
    make_turn,
    missing,
    need,
    opt_str,
)
from engine.conversation.tree import NEW_TITLE, Node

NAME = "lmstudio"
LABEL = "LM Studio"


def sniff(record: Any) -> bool:
    return isinstance(record, dict) and isinstance(record.get("messages"), list) and \
        all(isinstance(m, dict) and "versions" in m for m in record["messages"][:3])


def read(record: dict[str, Any]) -> Imported:
    created = epoch(record.get("createdAt"), "createdAt") or 0.0
    root = node = Node.root()
    system = opt_str(record.get("systemPrompt"), "systemPrompt")
    if system and system.strip():
        node = node.add(make_turn("system", system.strip(), created))
    model = None
    for i, m in enumerate(bounded(record["messages"], list, "messages")):
        where = f"messages[{i}]"
        m = need(m, dict, where)
        versions = need(m.get("versions"), list, f"{where}.versions")
        if not versions:
            continue
        shown = m.get("currentlySelected", len(versions) - 1)
        shown = shown if type(shown) is int and 0 <= shown < len(versions) else len(versions) - 1
        parent, kept = node, None
        for j, v in enumerate(versions):
            v = need(v, dict, f"{where}.versions[{j}]")
            role = need(v.get("role"), str, f"{where}.versions[{j}].role")
            text = _content(v, f"{where}.versions[{j}]")
            child = parent.add(make_turn(role, text, created))
            if j == shown:
                kept = child
            sender = v.get("senderInfo")
            if role == "assistant" and isinstance(sender, dict) and \
                    isinstance(sender.get("senderName"), str):
                model = sender["senderName"][:200]
        assert kept is not None
        parent.chosen = parent.children.index(kept)
        node = kept
    updated = epoch(record.get("userLastMessagedAt"), "userLastMessagedAt") or created
    return Imported(NAME, opt_str(record.get("name"), "name") or NEW_TITLE, root, created,
                    updated, None, model)


def _content(v: dict[str, Any], where: str) -> str:
    if v.get("type") == "multiStep":
        steps = need(v.get("steps") or [], list, f"{where}.steps")
        return join(*(_blocks(s.get("content") or [], f"{where}.steps[{k}]")
                      for k, s in enumerate(steps)
                      if isinstance(s, dict) and s.get("type") == "contentBlock"))
    return _blocks(v.get("content") or [], where)


def _blocks(blocks: Any, where: str) -> str:
    out = []
    for k, b in enumerate(need(blocks, list, f"{where}.content")):
        b = need(b, dict, f"{where}.content[{k}]")
        if b.get("type") == "text":
            out.append(need(b.get("text", ""), str, f"{where}.content[{k}].text"))
        elif b.get("type") == "file":
            name = b.get("name") or b.get("fileIdentifier") or "unnamed"
            out.append(missing(str(name)[:200], "image" if b.get("fileType") == "image" else "file"))
        elif "type" not in b:
            raise fail(f"{where}.content[{k}] has no type")
    return join(*out)
