"""The conversation tree as plain JSON, for the ``tree`` entry of a ``.duet`` file's settings.

A flat list of nodes (parents before children, ``parent`` -1 for the first messages) so that a
long chat is never deeply nested JSON. Each node keeps its reply's stats, finish reason and
drafted spans, so a reopened conversation shows them again; a reply's ``tool_calls`` and a tool
result's ``tool_call_id`` and ``name`` are written only when present, so a tree without tool
turns is the same as before. Reading validates everything (the tool fields within the limits of
engine.conversation.session.meta) and returns None on anything unexpected, or when the tree's current path
is not exactly the saved messages, tool fields included (an older Duet, or another tool, wrote
the file): the caller then shows the messages as a linear chat.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from engine.chat.messages import Attachment, Image, Message, ToolCall
from engine.conversation.session.meta import (
    MAX_ARGUMENTS_CHARS,
    MAX_ATTACHMENTS,
    MAX_IMAGES,
    MAX_TOOL_CALLS,
    MAX_TOOL_ID_CHARS,
    SavedAttachment,
    SavedImage,
)
from engine.conversation.tree import Conversation, Node, Turn
from engine.errors import SessionError
from engine.events import Stats

log = logging.getLogger(__name__)

TREE_VERSION = 1
ROLES = ("system", "user", "assistant", "tool")
MAX_NODES = 100_000
_STAT_FIELDS = {f.name: f.type for f in dataclasses.fields(Stats)}


def stats_to_json(stats: Stats | None) -> dict[str, Any] | None:
    return None if stats is None else dataclasses.asdict(stats)


def stats_from_json(obj: Any) -> Stats | None:
    if not isinstance(obj, dict):
        return None
    kwargs: dict[str, Any] = {}
    for name, value in obj.items():
        if name not in _STAT_FIELDS:
            continue
        if name == "drafter":
            if isinstance(value, str):
                kwargs[name] = value
        elif name == "drafters_used":
            if isinstance(value, dict) and all(isinstance(k, str) and type(v) is int
                                               for k, v in value.items()):
                kwargs[name] = dict(value)
        elif type(value) in (int, float) and math.isfinite(value):
            kwargs[name] = value
    return Stats(**kwargs)


CUT = "worker_lost"  # the finish reason of a reply cut by a lost RPC worker


def tree_to_json(conv: Conversation, *, streaming: bool = False) -> dict[str, Any]:
    """The tree as JSON; the streaming reply (or tool turn still waiting or running) is left
    out unless ``streaming``, and so is whatever follows it."""
    nodes: list[dict[str, Any]] = []
    index: dict[int, int] = {id(conv.root): -1}
    for node in conv.walk():
        t = node.turn
        if (t.streaming and not streaming) or id(node.parent) not in index:
            continue
        index[id(node)] = len(nodes)
        d: dict[str, Any] = {
            "parent": index[id(node.parent)], "role": t.role, "text": t.text, "time": t.time,
            "chosen": node.chosen, "spans": [[a, b] for a, b in t.spans],
            "stats": stats_to_json(t.stats), "reason": t.reason, "think_s": t.think_s}
        if t.tool_calls:
            d["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                               for c in t.tool_calls]
        if t.tool_call_id is not None:
            d["tool_call_id"] = t.tool_call_id
        if t.name is not None:
            d["name"] = t.name
        if t.attachments:
            d["attachments"] = [SavedAttachment(a.name, a.kind, a.sha256, a.text, a.pages,
                                                a.mode).to_json() for a in t.attachments]
        if t.images:  # by their SHA-256: the bytes are the file's sections (tree_images)
            d["images"] = [{"name": i.name, "sha256": i.sha256} for i in t.images]
        nodes.append(d)
    return {"version": TREE_VERSION, "chosen": conv.root.chosen, "nodes": nodes}


def streaming_node(conv: Conversation, tree: dict[str, Any]) -> int:
    """The index in ``tree`` (``tree_to_json(conv, streaming=True)``) of the streaming reply."""
    for i, node in enumerate(conv.walk()):
        if node.turn.streaming:
            return i
    raise ValueError("no reply is streaming")


def cut_reply(tree: dict[str, Any], node: int, text: str) -> dict[str, Any]:
    """A copy of ``tree`` whose node ``node`` (the reply that was streaming) holds ``text``,
    marked as cut (reason :data:`CUT`)."""
    nodes = list(tree["nodes"])
    nodes[node] = {**nodes[node], "text": text, "reason": CUT, "stats": None,
                   "spans": [s for s in nodes[node]["spans"] if s[1] <= len(text)]}
    return {**tree, "nodes": nodes}


def tree_images(conv: Conversation) -> tuple[Image, ...]:
    """Every picture of the tree (every version of every message): what its file keeps."""
    return tuple(i for node in conv.walk() for i in node.turn.images)


def tree_from_json(obj: Any, messages: Sequence[Message],
                   pictures: Mapping[str, bytes] | None = None) -> Node | None:
    """The root of the saved tree, or None when absent, invalid or not matching ``messages``;
    ``pictures``: the file's pictures by SHA-256 (one not there is left out of its turn)."""
    try:
        root = _parse(obj, pictures or {})
    except (KeyError, TypeError, ValueError) as e:
        log.warning("ignoring the saved conversation tree: %s", e)
        return None
    if root is None:
        return None
    path, node = [], root.current
    while node is not None:
        path.append(node.turn.message())  # compared on role, text and tool fields (not time)
        node = node.current
    if path != list(messages):
        log.warning("ignoring the saved conversation tree: its current path is not the messages")
        return None
    return root


def _parse(obj: Any, pictures: Mapping[str, bytes]) -> Node | None:
    if not isinstance(obj, dict) or obj.get("version") != TREE_VERSION:
        return None
    raw = obj["nodes"]
    if not isinstance(raw, list) or len(raw) > MAX_NODES:
        raise ValueError("nodes is not a list of a sane length")
    root = Node.root()
    nodes: list[Node] = []
    chosen: list[int] = []
    for i, d in enumerate(raw):
        parent_i = d["parent"]
        if type(parent_i) is not int or not -1 <= parent_i < i:
            raise ValueError(f"node {i} has a bad parent")
        role, text, when = d["role"], d["text"], d["time"]
        if role not in ROLES or not isinstance(text, str) or type(when) not in (int, float) \
                or not math.isfinite(when):
            raise ValueError(f"node {i} is malformed")
        spans = []
        for span in d.get("spans") or []:
            a, b = span
            if type(a) is not int or type(b) is not int or not 0 <= a < b <= len(text):
                raise ValueError(f"node {i} has a bad span")
            spans.append((a, b))
        reason, think = d.get("reason"), d.get("think_s")
        turn = Turn(role, text, spans, stats_from_json(d.get("stats")),
                    reason if isinstance(reason, str) else None, time=float(when),
                    think_s=float(think) if type(think) in (int, float) and
                    math.isfinite(think) and think >= 0 else None,
                    tool_calls=_calls(d.get("tool_calls", []), i),
                    tool_call_id=_tool_id(d, "tool_call_id", i), name=_tool_id(d, "name", i),
                    attachments=_attachments(d.get("attachments", []), i),
                    images=_images(d.get("images", []), i, pictures))
        parent = root if parent_i < 0 else nodes[parent_i]
        node = Node(turn, parent)
        parent.children.append(node)
        nodes.append(node)
        c = d.get("chosen", 0)
        chosen.append(c if type(c) is int else 0)
    for node, c in zip(nodes, chosen):
        node.chosen = c if 0 <= c < len(node.children) else max(0, len(node.children) - 1)
    c = obj.get("chosen", 0)
    root.chosen = c if type(c) is int and 0 <= c < len(root.children) else 0
    return root


def _images(raw: Any, i: int, pictures: Mapping[str, bytes]) -> tuple[Image, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_IMAGES:
        raise ValueError(f"node {i} has bad images")
    refs = [SavedImage.from_json(x, f"node {i} image") for x in raw]
    return tuple(Image(pictures[r.sha256], r.name) for r in refs if r.sha256 in pictures)


def _calls(raw: Any, i: int) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_TOOL_CALLS:
        raise ValueError(f"node {i} has tool_calls that are not a list of at most "
                         f"{MAX_TOOL_CALLS}")
    calls = []
    for c in raw:
        if not isinstance(c, dict) or set(c) != {"id", "name", "arguments"}:
            raise ValueError(f"node {i} has a malformed tool call")
        arguments = c["arguments"]
        if not isinstance(arguments, str) or len(arguments) > MAX_ARGUMENTS_CHARS:
            raise ValueError(f"node {i} has a tool call with bad arguments")
        calls.append(ToolCall(_short(c["id"], "tool call id", i),
                              _short(c["name"], "tool call name", i), arguments))
    return tuple(calls)


def _tool_id(d: dict[str, Any], key: str, i: int) -> str | None:
    """``d[key]`` (the call a tool result answers, or its function's name), None when absent."""
    return _short(d[key], key, i) if key in d else None


def _short(value: Any, what: str, i: int) -> str:
    if not isinstance(value, str) or len(value) > MAX_TOOL_ID_CHARS:
        raise ValueError(f"node {i} has a bad {what}")
    return value


def describe(obj: Any) -> str | None:
    """One line about a saved tree for ``duet-cli session inspect`` (None: no tree saved)."""
    try:
        root = _parse(obj, {})
    except (KeyError, TypeError, ValueError) as e:
        return f"invalid ({e})"
    if root is None:
        return None
    n = branched = 0
    stack = [root]
    depth = 0
    while stack:
        node = stack.pop()
        n += node is not root
        branched += len(node.children) > 1
        stack.extend(node.children)
    at = root.current
    while at is not None:
        depth += 1
        at = at.current
    return (f"{n} messages in all, {depth} on the path shown, "
            f"{branched} message{'s' if branched != 1 else ''} with several versions")


def _attachments(raw: Any, i: int) -> tuple[Attachment, ...]:
    """A node's files, checked as a .duet file's messages are (engine.conversation.session.meta)."""
    if not isinstance(raw, list) or len(raw) > MAX_ATTACHMENTS:
        raise ValueError(f"node {i} has bad attachments")
    try:
        saved = [SavedAttachment.from_json(a, f"node {i} attachment") for a in raw]
    except SessionError as e:
        raise ValueError(str(e)) from None
    return tuple(Attachment(a.name, a.kind, a.sha256, a.text, a.pages, a.mode) for a in saved)
