"""The figures a streaming reply shows while it streams: tokens per second from its first
token on (that token's time starts the clock), how many came from drafts, and the context's
fill. No Qt of its own.
"""

from __future__ import annotations

import time

from app.engine_link.messages import TokenBatch
from engine.conversation.tree import Conversation
from engine.events import Stats


class LiveFigures:
    """``start(cid)`` as a reply begins, ``tokens(conv, batch)`` as its tokens arrive (they go
    into ``conv`` with its status), ``end(cid)`` once it finished or failed."""

    def __init__(self) -> None:
        self._live: dict[str, tuple[float, int, int]] = {}  # id → (first token at, tokens, drafted)

    def start(self, cid: str) -> None:
        self._live[cid] = (0.0, 0, 0)

    def end(self, cid: str | None) -> None:
        self._live.pop(cid or "", None)

    def tokens(self, conv: Conversation, batch: TokenBatch) -> None:
        first, n, drafted = self._live.get(conv.id, (0.0, 0, 0))
        now = time.monotonic()
        if n == 0:
            first = now
        n += len(batch.tokens)
        drafted += sum(t.from_draft for t in batch.tokens)
        self._live[conv.id] = (first, n, drafted)
        if n > 1 and now > first:  # the first batch's time is the start of the clock
            conv.status.stats = Stats(n_tokens=n - 1, gen_s=now - first, proposed=n,
                                      accepted=drafted)
            conv.status.live = True
        if batch.n_past:  # the context's fill, live (not the last reply's)
            conv.status.n_past, conv.status.n_ctx = batch.n_past, batch.n_ctx
        conv.append_tokens(batch.tokens)
        conv.notify("status")
