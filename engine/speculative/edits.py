"""Edits the reply has made to the text it copies, learned so the next copy makes them too.

When a copy breaks off and then resumes a few tokens further on in its source, the reply has
replaced a short source span with a short span of its own: ``Item`` by ``_item`` when methods
are renamed to snake_case, ``foo`` by ``bar`` when a variable is renamed. Such edits recur
(every later ``Item`` in the source becomes ``_item``), so the n-gram drafter applies the ones
it has learned while it copies, and drafts through them instead of breaking at each.

An edit that the reply then does not make (``__init__`` is not renamed) loses trust; one that
has failed as often as it held is no longer applied. Only short spans are kept: a long
replacement is a rewrite, not an edit that recurs.

Given the tokenizer, an edit that converts an identifier to another style (``addItem`` to
``add_item``) also teaches that style, and one that renames an identifier teaches the rename
(engine.speculative.styles): every later identifier it applies to is then drafted converted, however
it is tokenized there, each the edit of its own span.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.speculative.styles import STYLES, Style, StyleRule, Vocab, Words, renamed, stated_renames, trust

__all__ = ["Edit", "EditMemory"]

MAX_SPAN = 8  # longest source or output span learned as an edit


@dataclass(eq=False)
class Edit:
    """The reply wrote ``output`` where its source has ``source``."""

    source: tuple[int, ...]
    output: tuple[int, ...]
    held: int = 0  # times it was applied and the reply made it (counted on ``style`` if set)
    failed: int = 0  # times it was applied and the reply did not
    style: StyleRule | None = None  # the learned style this edit applies, if it comes from one

    @property
    def trust(self) -> float:
        """Estimated probability that the reply makes this edit at the next occurrence."""
        return self.style.trust if self.style is not None else trust(self.held, self.failed)


class EditMemory:
    """Learned edits, looked up by the first token of their source span, and learned styles
    (only with a ``vocab`` to read and write identifiers)."""

    def __init__(self, vocab: Vocab | None = None) -> None:
        self._by_first: dict[int, list[Edit]] = {}
        self._words = Words(vocab) if vocab is not None else None
        self.styles: list[StyleRule] = []
        self._styled: dict[tuple[int, ...], Edit | None] = {}  # source span -> its styled edit

    def clear(self) -> None:
        self._by_first = {}
        self.styles = []
        self._styled = {}

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

    def learn_stated(self, prompt: Sequence[int]) -> list[StyleRule]:
        """Learn the renames (and the styles they show) that ``prompt`` states."""
        if self._words is None:
            return []
        text = "".join(self._words.text(t) or "" for t in prompt)
        return [self._add_rule(self._rule_for(old, new)) for old, new in stated_renames(text)]

    def learn_style(self, tokens: Sequence[int], src: int, out: int) -> StyleRule | None:
        """The reply made an edit at ``tokens[out]`` to the source at ``tokens[src]``: if it
        converted the identifier there to another style, or renamed it, learn that rule."""
        words = self._words
        if words is None:
            return None
        while (src > 0 and out > 0 and tokens[src - 1] == tokens[out - 1]
               and (words.continues_word(tokens, src) or words.continues_word(tokens, out))):
            # back to where the word starts: the edit began inside it, in the source (``Item``
            # of ``addItem``) or in the reply only (``_in`` after ``a``, renaming ``a`` ``a_in``)
            src, out = src - 1, out - 1
        a, b = words.identifier_at(tokens, src), words.identifier_at(tokens, out)
        if a is None or b is None or a.lead != b.lead or a.name == b.name:
            return None
        return self._add_rule(self._rule_for(a.name, b.name))

    @staticmethod
    def _rule_for(old: str, new: str) -> Style:
        """The style that turns ``old`` into ``new``, else the rename of ``old``."""
        style = next((s for s in STYLES if s.convert(old) == new), None)
        return style if style is not None else renamed(old, new)

    def _add_rule(self, style: Style) -> StyleRule:
        rule = next((r for r in self.styles if r.style.name == style.name), None)
        if rule is None:
            rule = StyleRule(style)
            if style.renames is not None:  # a rename before the styles, and the latest of a name
                self.styles = [rule] + [r for r in self.styles if r.style.renames != style.renames]
            else:
                self.styles.append(rule)
            self._styled = {}
        return rule

    def at(self, tokens: Sequence[int], pos: int) -> Edit | None:
        """The trusted edit whose source span starts at ``tokens[pos]``, if any: a learned one,
        else the conversion of the identifier there by a learned style."""
        if pos >= len(tokens):
            return None
        for edit in self._by_first.get(tokens[pos], ()):
            n = len(edit.source)
            if edit.failed <= edit.held and tuple(tokens[pos:pos + n]) == edit.source:
                return edit
        if any(rule.active for rule in self.styles):
            return self._style_at(tokens, pos)
        return None

    def _style_at(self, tokens: Sequence[int], pos: int) -> Edit | None:
        ident = self._words.identifier_at(tokens, pos)
        if ident is None:
            return None
        source = tuple(tokens[pos:ident.end])
        if source not in self._styled:
            self._styled[source] = None
            for rule in self.styles:
                new = rule.style.convert(ident.name) if rule.active else None
                if new is not None:
                    output = self._words.tokenize(ident.lead + new + ident.trail)
                    if output and output != source and len(output) <= MAX_SPAN:
                        self._styled[source] = Edit(source, output, style=rule)
                    break
        edit = self._styled[source]
        return edit if edit is not None and edit.style.active else None

    @staticmethod
    def confirm(edit: Edit, held: bool) -> None:
        counts = edit.style if edit.style is not None else edit
        if held:
            counts.held += 1
        else:
            counts.failed += 1
