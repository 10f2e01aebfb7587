"""A conversation as a tree of message versions; the *current path* is what is shown and sent.

Every message is a ``Node`` holding a ``Turn``. Editing a user message or regenerating a reply
adds a sibling (a new version) instead of replacing it; each node remembers which of its
children is chosen, so the current path runs from the root through the chosen children.
Switching versions changes only the choice at one level: the messages before it are shared,
so the engine's cache keeps them (it reuses the longest common token prefix).

Changes are announced to subscribers as ``Change`` values: ``kind`` "path" (the messages from
``index`` on changed), "text" (the streaming reply at ``index`` grew), "meta" (title, file,
preset) or "status" (figures and notice).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.chat.messages import Attachment, Image, Message, ToolCall
from engine.events import Done, Stats, Token

log = logging.getLogger(__name__)

NEW_TITLE = "New conversation"
TITLE_CHARS = 48


@dataclass
class Turn:
    """One message. ``spans``: character ranges of ``text`` that came from the drafter.

    Tool turns: an assistant's ``tool_calls`` are the calls its reply made (taken out of its
    text); a ``tool`` turn is the result of call ``tool_call_id`` (function ``name``), untrusted
    text. A tool turn is ``streaming`` while it waits for the person (``ask``) or runs; it ends
    with ``reason`` None (it ran), "error" (the tool failed), "denied" or "cancelled".
    """

    role: str
    text: str
    spans: list[tuple[int, int]] = field(default_factory=list)
    stats: Stats | None = None
    reason: str | None = None  # how an assistant reply ended (stop, length, cancelled…)
    streaming: bool = False
    time: float = field(default_factory=time.time)  # when it was written (epoch seconds)
    think_s: float | None = None  # how long a <think> section took to stream (None: none)
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    ask: bool = False
    attachments: tuple[Attachment, ...] = ()  # files a user's message carries
    images: tuple[Image, ...] = ()  # pictures a user's message carries
    sources: tuple[str, ...] = ()  # what a reply saw of the files ("manual.pdf p. 12"), shown

    def message(self) -> Message:
        return Message(self.role, self.text, self.time, tool_calls=self.tool_calls,
                       tool_call_id=self.tool_call_id, name=self.name,
                       attachments=self.attachments, images=self.images)

    @classmethod
    def of(cls, m: Message) -> Turn:
        return cls(m.role, m.content, time=m.time, tool_calls=m.tool_calls,
                   tool_call_id=m.tool_call_id, name=m.name, attachments=m.attachments,
                   images=m.images)


class Node:
    """A message in the tree: its turn, its parent, its versions' children and the chosen one."""

    __slots__ = ("turn", "parent", "children", "chosen")

    def __init__(self, turn: Turn, parent: Node | None = None) -> None:
        self.turn = turn
        self.parent = parent  # None only for the root
        self.children: list[Node] = []
        self.chosen = 0

    @classmethod
    def root(cls) -> Node:
        """The top of a tree: no message of its own (its turn is a placeholder, never shown)."""
        return cls(Turn("root", ""))

    @property
    def up(self) -> Node:
        """The parent of a message (every node but the root has one)."""
        if self.parent is None:
            raise ValueError("the root has no parent")
        return self.parent

    def add(self, turn: Turn) -> Node:
        child = Node(turn, self)
        self.children.append(child)
        self.chosen = len(self.children) - 1
        return child

    @property
    def current(self) -> Node | None:
        return self.children[self.chosen] if self.children else None


@dataclass(frozen=True)
class Change:
    kind: str  # "path", "text", "meta" or "status"
    index: int = 0


@dataclass
class Status:
    """What the status bar and the notice show for this conversation (never another's)."""

    stats: Stats | None = None  # the last reply's, or the one streaming (``live``)
    live: bool = False  # ``stats`` are the streaming reply's so far (tokens, drafted ones)
    n_past: int = 0  # tokens in the engine's cache for this conversation (0: unknown)
    n_ctx: int = 0
    dropped: int = 0  # messages out of the model's view (the oldest, dropped to fit)


def add_span(spans: list[tuple[int, int]], start: int, end: int) -> None:
    """Append [start, end), merging with the last span when they touch."""
    if end <= start:
        return
    if spans and spans[-1][1] >= start:
        spans[-1] = (spans[-1][0], max(spans[-1][1], end))
    else:
        spans.append((start, end))


def title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1].rstrip() + "…"


class Conversation:
    def __init__(self, title: str = NEW_TITLE, path: Path | None = None,
                 turns: Iterable[Turn] = ()) -> None:
        self.id = uuid.uuid4().hex
        self.title = title
        self.path = path
        self.root = Node.root()
        node = self.root
        for turn in turns:
            node = node.add(turn)
        self.loaded = path is None  # a saved conversation is read on first open
        self.dirty = False
        self.preset: str | None = None  # name of the preset chosen for this chat
        self.settings: dict[str, Any] = {}  # this chat's own sampling/system overrides
        self.model: Path | None = None  # the target file its last reply was made with
        self.status = Status()
        self._resumed_at: int | None = None  # length of a reply being continued
        self._listeners: list[Callable[[Conversation, Change], None]] = []

    # -- subscribers ---------------------------------------------------------------------
    def subscribe(self, callback: Callable[[Conversation, Change], None]) -> None:
        self._listeners.append(callback)

    def unsubscribe(self, callback: Callable[[Conversation, Change], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def notify(self, kind: str, index: int = 0) -> None:
        for callback in list(self._listeners):
            callback(self, Change(kind, index))

    # -- the current path ----------------------------------------------------------------
    def path_nodes(self) -> list[Node]:
        nodes, node = [], self.root.current
        while node is not None:
            nodes.append(node)
            node = node.current
        return nodes

    @property
    def turns(self) -> list[Turn]:
        """The messages shown (the current path), oldest first."""
        return [n.turn for n in self.path_nodes()]

    def node(self, index: int) -> Node:
        nodes = self.path_nodes()
        if not 0 <= index < len(nodes):
            raise IndexError(f"no message {index}")
        return nodes[index]

    def versions(self, index: int) -> tuple[int, int]:
        """(1-based number of the version shown, number of versions) of message ``index``."""
        parent = self.node(index).up
        return parent.chosen + 1, len(parent.children)

    def engine_messages(self, upto: int | None = None) -> tuple[Message, ...]:
        """The finished messages of the current path before ``upto`` (all by default)."""
        turns = self.turns if upto is None else self.turns[:upto]
        return tuple(t.message() for t in turns if not t.streaming)

    def next_messages(self, text: str, system_prompt: str = "",
                      attachments: tuple[Attachment, ...] = (),
                      images: tuple[Image, ...] = ()) -> tuple[Message, ...]:
        """The messages a reply would be given after ``add_user(text, ...)``, without adding
        it (the prompt of a message still being written, read ahead)."""
        head = self.engine_messages()
        if not self.turns and system_prompt.strip():
            head = (Turn("system", system_prompt.strip()).message(),)
        return head + (Turn("user", text, attachments=attachments, images=images).message(),)

    def _last(self) -> Node:
        nodes = self.path_nodes()
        return nodes[-1] if nodes else self.root

    # -- edits ---------------------------------------------------------------------------
    def add_user(self, text: str, system_prompt: str = "",
                 attachments: tuple[Attachment, ...] = (), images: tuple[Image, ...] = ()) -> Turn:
        n = len(self.turns)
        if n == 0 and system_prompt.strip():
            self.root.add(Turn("system", system_prompt.strip()))
        if not any(t.role == "user" for t in self.turns) and self.title == NEW_TITLE:
            self.title = title_from(text)
            self.notify("meta")
        turn = Turn("user", text, attachments=attachments, images=images)
        self._last().add(turn)
        self.dirty = True
        self.notify("path", n)
        return turn

    def edit(self, index: int, text: str) -> Turn:
        """A new version of user message ``index`` (with the files it carried); what followed
        the old one stays with it."""
        node = self.node(index)
        if node.turn.role != "user":
            raise ValueError("only a user message can be edited")
        turn = Turn("user", text, attachments=node.turn.attachments, images=node.turn.images)
        node.up.add(turn)
        self.dirty = True
        self.notify("path", index)
        return turn

    def begin_reply(self, index: int | None = None) -> Turn:
        """Start a streaming reply: at the end, or as a new version of reply ``index``."""
        turn = Turn("assistant", "", streaming=True)
        if index is None:
            at = len(self.turns)
            self._last().add(turn)
        else:
            node = self.node(index)
            if node.turn.role != "assistant":
                raise ValueError("only a reply can be regenerated")
            at = index
            node.up.add(turn)
        self.notify("path", at)
        return turn

    def switch(self, index: int, step: int) -> bool:
        """Show another version of message ``index`` (``step`` -1 or +1); False at either end."""
        parent = self.node(index).up
        chosen = parent.chosen + step
        if not 0 <= chosen < len(parent.children) or self.streaming is not None:
            return False
        parent.chosen = chosen
        self.dirty = True
        self.notify("path", index)
        return True

    @property
    def streaming(self) -> Turn | None:
        last = self._last().turn
        return last if last.streaming else None

    def append_tokens(self, tokens: Sequence[Token]) -> None:
        turn = self.streaming
        if turn is None:
            return
        parts = []
        pos = len(turn.text)
        for tok in tokens:
            if tok.from_draft:
                add_span(turn.spans, pos, pos + len(tok.text))
            parts.append(tok.text)
            pos += len(tok.text)
        turn.text += "".join(parts)
        if turn.think_s is None and "</think>" in turn.text and \
                turn.text.lstrip().startswith("<think>"):
            turn.think_s = max(0.0, time.time() - turn.time)
        self.notify("text", len(self.turns) - 1)

    def resume_reply(self) -> Turn:
        """Stream more of the last reply (Continue after a length stop)."""
        nodes = self.path_nodes()
        if not nodes or nodes[-1].turn.role != "assistant" or nodes[-1].turn.streaming:
            raise ValueError("there is no finished reply to continue")
        turn = nodes[-1].turn
        turn.streaming, turn.reason = True, None
        self._resumed_at = len(turn.text)
        self.notify("text", len(nodes) - 1)
        return turn

    def finish_reply(self, done: Done, calls: Sequence[ToolCall] = ()) -> Turn | None:
        """End the streaming reply with ``done`` (its text is authoritative: it holds the tail;
        after ``resume_reply`` it is what was added to the reply); ``calls``: the tool calls
        it made (taken out of its text)."""
        turn = self.streaming
        if turn is None or turn.role != "assistant":
            return None
        turn.tool_calls = tuple(calls)
        head = turn.text[:self._resumed_at] if self._resumed_at is not None else ""
        self._resumed_at = None
        text = head + done.text
        turn.spans = [(a, min(b, len(text))) for a, b in turn.spans if a < len(text)]
        turn.text = text
        turn.stats, turn.reason, turn.streaming = done.stats, done.reason, False
        turn.time = time.time()
        self.dirty = True
        self.notify("text", len(self.turns) - 1)
        return turn

    # -- tool turns ----------------------------------------------------------------------
    def add_tool(self, call: ToolCall) -> Turn:
        """The result of ``call`` to come, after the last message: waiting for the person."""
        turn = Turn("tool", "", streaming=True, tool_call_id=call.id, name=call.name, ask=True)
        at = len(self.turns)
        self._last().add(turn)
        self.notify("path", at)
        return turn

    def run_tool(self, turn: Turn) -> None:
        """The person allowed the call of ``turn``: it runs now."""
        turn.ask = False
        self.notify("text", self._index(turn))

    def finish_tool(self, turn: Turn, text: str, reason: str | None = None) -> None:
        """The call of ``turn`` ended: its result (None), an "error", "denied" or "cancelled"."""
        turn.text, turn.reason, turn.streaming, turn.ask = text, reason, False, False
        turn.time = time.time()
        self.dirty = True
        self.notify("text", self._index(turn))

    def call_of(self, index: int) -> ToolCall | None:
        """The call that tool turn ``index`` answers (in the reply before it), if any."""
        turns = self.turns
        turn_id = turns[index].tool_call_id
        for t in reversed(turns[:index]):
            if t.role == "assistant":
                return next((c for c in t.tool_calls if c.id == turn_id), None)
        return None

    def _index(self, turn: Turn) -> int:
        return next(i for i, t in enumerate(self.turns) if t is turn)

    def abort_reply(self) -> None:
        """Drop a reply that failed before producing anything; keep partial text otherwise."""
        turn = self.streaming
        if turn is None:
            return
        self._resumed_at = None
        if turn.text:
            turn.streaming, turn.reason = False, "error"
            self.notify("text", len(self.turns) - 1)
            return
        node = self._last()
        parent = node.up
        at = len(self.turns) - 1
        parent.children.remove(node)
        parent.chosen = max(0, len(parent.children) - 1)
        self.notify("path", at)

    def remove(self, index: int) -> None:
        """Remove the version shown of message ``index`` (and what follows it)."""
        node = self.node(index)
        parent = node.up
        parent.children.remove(node)
        parent.chosen = max(0, min(parent.chosen, len(parent.children) - 1))
        self.dirty = True
        self.notify("path", index)

    def set_system(self, text: str) -> int | None:
        """Set the system prompt: a new version of the first message (the old path kept), or a
        new first message. Returns the number of messages after it (None: nothing changed)."""
        text = text.strip()
        nodes = self.path_nodes()
        first = nodes[0] if nodes else None
        if first is not None and first.turn.role == "system":
            if first.turn.text == text:
                return None
            after = len(nodes) - 1
            if not text:
                return None
            new = self.root.add(Turn("system", text))
            for child in first.children:  # the rest of the path follows the new system prompt
                copy = _copy_subtree(child, new)
                new.children.append(copy)
            new.chosen = first.chosen
        else:
            if not text:
                return None
            after = len(nodes)
            old_children, old_chosen = self.root.children, self.root.chosen
            self.root.children = []
            new = self.root.add(Turn("system", text))
            for child in old_children:
                child.parent = new
            new.children, new.chosen = old_children, old_chosen
        self.dirty = True
        self.notify("path", 0)
        return after

    def set_messages(self, messages: Sequence[Message]) -> None:
        """Replace everything with a linear conversation of ``messages``."""
        self.root = Node.root()
        node = self.root
        for m in messages:
            node = node.add(Turn.of(m))
        self.loaded = True
        self.dirty = False
        self.notify("path", 0)

    def set_root(self, root: Node) -> None:
        self.root = root
        self.loaded = True
        self.dirty = False
        self.notify("path", 0)

    def rename(self, title: str) -> None:
        self.title = title
        self.notify("meta")

    def set_status(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.status, key, value)
        self.notify("status")

    def walk(self) -> Iterator[Node]:
        """Every node but the root, parents before children (no recursion)."""
        stack = list(reversed(self.root.children))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


def _copy_turn(turn: Turn) -> Turn:
    return replace(turn, spans=list(turn.spans))


def _copy_subtree(node: Node, parent: Node) -> Node:
    """A copy of ``node`` and its descendants under ``parent`` (iterative)."""
    top = Node(_copy_turn(node.turn), parent)
    top.chosen = node.chosen
    stack = [(node, top)]
    while stack:
        src, dst = stack.pop()
        for child in src.children:
            c = Node(_copy_turn(child.turn), dst)
            c.chosen = child.chosen
            dst.children.append(c)
            stack.append((child, c))
    return top
