"""One shape for a dialect's reply: what OpenAI's chat and text completions, its Responses API,
Anthropic's messages and Ollama's chat and generate each implement, and the one loop that drives
a stream through it. A dialect only says how its bodies look; when they are sent, how an error
in the middle of a stream is told and what a client that leaves means are decided here."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

from engine.chat.messages import ToolCall
from engine.events import Token
from engine.prompts.request import Call, End, Piece, Text
from engine.server.errors import ApiError, Gone

log = logging.getLogger(__name__)


class Shaper(Protocol):
    """One reply in one dialect. A stream is ``start``, then ``text`` and ``call`` in the order
    the reply gives them, then ``end``; each returns the bytes to send (often none). ``failed``
    tells an error that comes once the stream has begun; ``whole`` is the body of a reply that
    is not streamed. A reasoning model's thinking comes as text pieces marked ``thinking``
    (before the answer), and as ``whole``'s ``reasoning``."""

    media_type: str

    def start(self) -> list[bytes]: ...

    def text(self, piece: Text) -> list[bytes]: ...

    def call(self, call: ToolCall) -> list[bytes]: ...

    def end(self, end: End) -> list[bytes]: ...

    def failed(self, error: ApiError) -> list[bytes]: ...

    def whole(self, text: str, calls: list[ToolCall], tokens: list[Token], end: End,
              reasoning: str = "") -> Any: ...


async def stream(reply: AsyncIterator[Piece], shaper: Shaper) -> AsyncIterator[bytes]:
    """The bytes of a streamed reply (a client that leaves cancels its generation)."""
    try:
        for b in shaper.start():
            yield b
        async for p in reply:
            for b in _shaped(p, shaper):
                yield b
    except ApiError as e:
        for b in shaper.failed(e):
            yield b
    except Gone:
        log.info("a client disconnected; its generation is cancelled")


def _shaped(p: Piece, shaper: Shaper) -> list[bytes]:
    if isinstance(p, Text):
        return shaper.text(p)
    if isinstance(p, Call):
        return shaper.call(p.call)
    return shaper.end(p)
