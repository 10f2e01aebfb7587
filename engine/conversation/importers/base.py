"""What every reader gives back (``Imported``: a conversation as Duet's tree of versions), the
one error they raise (``ImportFailure``: one line), and the helpers they share: checked field
access, times, placeholders for files an export does not carry, and ``build_tree``, which turns
any export's parent links into Duet's tree without recursion.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engine.conversation.store import MAX_NODES
from engine.conversation.tree import Node, Turn
from engine.errors import DuetError

ROLES = ("system", "user", "assistant", "tool")


class ImportFailure(DuetError):
    """A record that cannot be imported; its message is one line, the caller names the record."""


@dataclass
class Imported:
    """One conversation read from an export. ``root``: Duet's tree (engine.conversation.tree),
    the chosen child at each level being the branch the source app showed; ``created`` and
    ``updated`` in epoch seconds; ``source_id``: the export's own id for it (None: it has none);
    ``model``: the model its replies name, if any; ``project``: the Duet project it was in
    (Duet's own export of everything)."""

    fmt: str
    title: str
    root: Node
    created: float
    updated: float
    source_id: str | None = None
    model: str | None = None
    project: str | None = None


def fail(what: str) -> ImportFailure:
    return ImportFailure(" ".join(what.split())[:300])


def need(obj: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """``obj`` if it is a ``kind`` (a bool is no int here), else ImportFailure naming ``where``."""
    if not isinstance(obj, kind) or (isinstance(obj, bool) and bool not in (
            kind if isinstance(kind, tuple) else (kind,))):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise fail(f"{where} is not a {name}")
    return obj


def bounded(obj: Any, kind: type, where: str) -> Any:
    """``need(obj, kind, where)`` for a collection of messages, refused before it is read when
    it holds more than a conversation may (engine.conversation.store.MAX_NODES; one more for
    an export's empty root)."""
    need(obj, kind, where)
    if len(obj) > MAX_NODES + 1:
        raise fail(f"it has more than {MAX_NODES:,} messages")
    return obj


def opt_str(obj: Any, where: str) -> str | None:
    return None if obj is None else need(obj, str, where)


def epoch(value: Any, where: str = "a time") -> float | None:
    """A time as epoch seconds: a number (seconds, or milliseconds past year 5138) or an ISO
    8601 string; None when absent. Anything else is an ImportFailure."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        t = float(value)
        if not math.isfinite(t):
            raise fail(f"{where} is not a finite number")
        t = t / 1000 if abs(t) > 1e11 else t
        if not -62e9 < t < 253e9:  # years 1 to 9999
            raise fail(f"{where} is out of range")
        return t
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise fail(f"{where} is not a time") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    raise fail(f"{where} is not a time")


def missing(name: str, kind: str = "file") -> str:
    """The visible stand-in for a file the export names but does not carry."""
    return f"[{kind} not in the export: {' '.join(name.split()) or 'unnamed'}]"


def join(*parts: str) -> str:
    return "\n\n".join(p for p in parts if p)


@dataclass(frozen=True)
class Entry:
    """A message of an export with parent links: ``parent`` (None or unknown: a first
    message), ``children`` in the source's order (its versions), ``turn`` (None: not kept; its
    children hang from its nearest kept ancestor), ``order`` (sorts children the source does
    not list)."""

    parent: str | None
    children: Sequence[str]
    turn: Turn | None
    order: float = 0.0


def build_tree(entries: Mapping[str, Entry], current: str | None) -> Node:
    """Duet's tree for ``entries``; the path to ``current`` is the one chosen (else the last
    version at each level). Iterative: a chain as deep as the file is long needs no stack; a
    cycle of parent links (messages no first message leads to) is an ImportFailure."""
    if len(entries) > MAX_NODES:
        raise fail(f"it has more than {MAX_NODES:,} messages")
    kids: dict[str | None, list[str]] = {}
    for key, e in entries.items():
        kids.setdefault(e.parent if e.parent in entries and e.parent != key else None,
                        []).append(key)
    for parent, found in kids.items():
        listed = entries[parent].children if parent is not None else ()
        rank = {k: i for i, k in enumerate(listed) if isinstance(k, str)}
        found.sort(key=lambda k: (rank.get(k, len(rank)), entries[k].order))
    root = Node.root()
    placed: dict[str, Node] = {}
    stack: list[tuple[str, Node]] = [(k, root) for k in reversed(kids.get(None, []))]
    while stack:
        key, up = stack.pop()
        turn = entries[key].turn
        node = up.add(turn) if turn is not None else up
        placed[key] = node
        stack.extend((k, node) for k in reversed(kids.get(key, [])))
    if len(placed) != len(entries):
        raise fail(f"its message tree has a cycle ({len(entries) - len(placed):,} messages "
                   "no first message leads to)")
    _reset_choice(root)
    at = current if current in placed else None
    steps = 0
    while at is not None and steps <= len(entries):
        node, e = placed[at], entries[at]
        if node is not root and e.turn is not None:
            node.up.chosen = node.up.children.index(node)
        at = e.parent if e.parent in placed and e.parent != at else None
        steps += 1
    return root


def _reset_choice(root: Node) -> None:
    """The last version at every level (what the source shows when it names no current)."""
    stack = [root]
    while stack:
        node = stack.pop()
        node.chosen = max(0, len(node.children) - 1)
        stack.extend(node.children)


def chain(turns: Sequence[Turn]) -> Node:
    """A linear conversation's tree."""
    root = node = Node.root()
    for t in turns:
        node = node.add(t)
    return root


def link_tools(root: Node) -> None:
    """Give each tool result without a call id the id of the last call before it on its path,
    so that the model reads it as that call's answer; a result no call precedes gets one."""
    stack: list[tuple[Node, str | None]] = [(c, None) for c in root.children]
    n = 0
    while stack:
        node, call = stack.pop()
        t = node.turn
        if t.role == "assistant" and t.tool_calls:
            call = t.tool_calls[-1].id
        elif t.role == "tool" and t.tool_call_id is None:
            if call is None:
                n += 1
                call = f"imported-{n}"
            t.tool_call_id = call
            t.name = t.name or "tool"
        stack.extend((c, call) for c in node.children)


def make_turn(role: str, text: str, when: float | None, **kw: Any) -> Turn:
    if role not in ROLES:
        raise fail(f"a message has the unknown role {role[:40]!r}")
    return Turn(role, text, time=when if when is not None else 0.0, **kw)
