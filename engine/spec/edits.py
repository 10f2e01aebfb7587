"""Edits the reply has made to the text it copies, learned so the next copy makes them too.

When a copy breaks off and then resumes a few tokens further on in its source, the reply has
replaced a short source span with a short span of its own: ``Item`` by ``_item`` when methods
are renamed to snake_case, ``foo`` by ``bar`` when a variable is renamed. Such edits recur
(every later ``Item`` in the source becomes ``_item``), so the n-gram drafter applies the ones
it has learned while it copies, and drafts through them instead of breaking at each.

An edit that the reply then does not make (``__init__`` is not renamed) loses trust; one that
has failed as often as it held is no longer applied. Only short spans are kept: a long
replacement is a rewrite, not an edit that recurs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Edit", "EditMemory"]

MAX_SPAN = 8  # longest source or output span learned as an edit


@dataclass(eq=False)
class Edit:
    """The reply wrote ``output`` where its source has ``source``."""

    source: tuple[int, ...]
    output: tuple[int, ...]
    held: int = 0  # times it was applied and the reply made it
    failed: int = 0  # times it was applied and the reply did not

    @property
    def trust(self) -> float:
        """Estimated probability that the reply makes this edit at the next occurrence."""
        return (self.held + 1.0) / (self.held + self.failed + 1.5)


class EditMemory:
    """Learned edits, looked up by the first token of their source span."""

    def __init__(self) -> None:
        self._by_first: dict[int, list[Edit]] = {}

    def clear(self) -> None:
        self._by_first = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_first.values())

    def learn(self, source: Sequence[int], output: Sequence[int]) -> Edit | None:
        """Remember that ``source`` became ``output`` (the latest edit of a span wins)."""
        source, output = tuple(source), tuple(output)
        if not source or len(source) > MAX_SPAN or len(output) > MAX_SPAN or source == output:
            return None
        edits = self._by_first.setdefault(source[0], [])
        edits[:] = [e for e in edits if e.source != source]
        edit = Edit(source, output)
        edits.append(edit)
        edits.sort(key=lambda e: -len(e.source))  # the longest span that matches wins
        return edit

    def at(self, tokens: Sequence[int], pos: int) -> Edit | None:
        """The trusted edit whose source span starts at ``tokens[pos]``, if any."""
        if pos >= len(tokens):
            return None
        for edit in self._by_first.get(tokens[pos], ()):
            n = len(edit.source)
            if edit.failed <= edit.held and tuple(tokens[pos:pos + n]) == edit.source:
                return edit
        return None

    @staticmethod
    def confirm(edit: Edit, held: bool) -> None:
        if held:
            edit.held += 1
        else:
            edit.failed += 1
