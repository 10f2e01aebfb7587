"""The responses kept for ``previous_response_id`` (OpenAI's Responses API): each holds the
messages its request added and its reply, and points to the response before it, so a
conversation is rebuilt by walking back and each message is kept once. In memory only (a
restarted server has none), least recently used first out, bounded by the characters held."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from engine.chat.messages import Message

MAX_CHARS = 32 << 20


@dataclass(frozen=True)
class Stored:
    previous: str | None
    messages: tuple[Message, ...]  # the request's input (not its instructions), then the reply
    chars: int


def _chars(messages: tuple[Message, ...]) -> int:
    return sum(len(m.content) + sum(len(c.arguments) + len(c.name) for c in m.tool_calls)
               for m in messages)


class ResponseStore:
    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self.max_chars = max_chars
        self.chars = 0
        self._items: OrderedDict[str, Stored] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, response_id: str, previous: str | None, messages: tuple[Message, ...]) -> None:
        item = Stored(previous, messages, _chars(messages))
        self._items[response_id] = item
        self.chars += item.chars
        while self.chars > self.max_chars and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self.chars -= old.chars

    def conversation(self, response_id: str) -> tuple[Message, ...] | None:
        """Every message up to and including ``response_id``'s reply, or None when it, or a
        response before it, is not kept."""
        parts: list[tuple[Message, ...]] = []
        seen: set[str] = set()
        at: str | None = response_id
        while at is not None:
            item = self._items.get(at)
            if item is None or at in seen:
                return None
            seen.add(at)
            self._items.move_to_end(at)  # the whole chain was used
            parts.append(item.messages)
            at = item.previous
        return tuple(m for part in reversed(parts) for m in part)
