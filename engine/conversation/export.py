"""Taking a conversation out: the path shown as Markdown, or the whole tree as JSON; and
finding an opened conversation by its title or text (the saved ones: search_index). No Qt."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from engine.conversation.store import tree_to_json
from engine.conversation.tree import Conversation

ROLE_TITLES = {"system": "System", "user": "You", "assistant": "Assistant"}


def to_markdown(conv: Conversation) -> str:
    """The branch shown, one section per message; code blocks stay as they were written."""
    lines = [f"# {conv.title}", ""]
    for turn in conv.turns:
        if turn.streaming:
            continue
        when = datetime.fromtimestamp(turn.time).strftime("%Y-%m-%d %H:%M")
        lines += [f"## {ROLE_TITLES.get(turn.role, turn.role)} · {when}", "", turn.text.rstrip(),
                  ""]
    return "\n".join(lines)


def to_json(conv: Conversation) -> str:
    """The whole conversation: the messages shown and the tree with every version."""
    data = {"app": "duet", "title": conv.title, "preset": conv.preset,
            "messages": [{"role": t.role, "content": t.text, "time": t.time}
                         for t in conv.turns if not t.streaming],
            "tree": tree_to_json(conv)}
    return json.dumps(data, indent=2, ensure_ascii=False)


def export(conv: Conversation, path: Path) -> None:
    """Write ``conv`` to ``path``: JSON for a ``.json`` name, Markdown otherwise (OSError)."""
    text = to_json(conv) if path.suffix.lower() == ".json" else to_markdown(conv)
    path.write_text(text, encoding="utf-8")


def matches(conv: Conversation, query: str) -> bool:
    """Whether ``query`` (case-insensitive) is in the title or in any version of any message."""
    q = query.casefold().strip()
    if not q or q in conv.title.casefold():
        return True
    return any(q in node.turn.text.casefold() for node in conv.walk())
