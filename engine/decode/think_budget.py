"""A budget for a reply's thinking: once the reply has spent ``budget`` tokens inside a
``<think>`` section, the section is closed for it (as llama-server's ``--reasoning-budget``):
the closing marker's tokens (engine.chat.reasoning.close_text) are forced into the reply, decoded
as the model's own, and the answer follows. The reply's text is followed with the same splitter
that shows it (engine.chat.think_split), so a section the model opens itself counts from there.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.chat.reasoning import close_text
from engine.chat.think_split import ThinkSplitter


class ThinkBudget:
    """One reply's count. ``observe`` each token's text; ``due`` says what to force next."""

    def __init__(self, budget: int, inside: bool, tokenize: Callable[[str], list[int]]) -> None:
        self.budget = budget
        self.tokenize = tokenize
        self.splitter = ThinkSplitter(inside)
        self.spent = 0  # tokens inside the section
        self.closed = False  # forced once: never again
        self._due: list[int] = []

    def observe(self, text: str) -> None:
        was = self.splitter.thinking
        self.splitter.feed(text)
        if was and self.splitter.thinking:
            self.spent += 1
        if not self.closed and self.splitter.thinking and self.spent >= self.budget:
            self.closed = True
            self._due = self.tokenize(close_text(self.splitter.thought + self.splitter.held))

    def due(self) -> list[int]:
        """The tokens to force into the reply now (taken: asked once)."""
        out, self._due = self._due, []
        return out
