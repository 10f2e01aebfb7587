"""Edits a reply makes to the text it copies, learned at one occurrence to draft the next ones.

When a copy breaks off and resumes a little further on in its source, the reply has replaced a
short source span by a short span of its own (``x`` by ``x: int``); such edits recur, so later
copies of the span are drafted with the edit made. When the break came inside an identifier that
reads differently in the reply (``entry`` where the source has ``item``), the reply renamed it:
the name recurs as other tokens (`` item``, ``(item``, ``[item``), so the rename is kept as text
and made wherever an identifier of that name starts, re-tokenized. An edit or rename is made
while it has held more often than it failed, the occurrence it was learned from counting once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from engine.llama.model import Model

__all__ = ["Edit", "Edits", "Rule"]

_IDENT = re.compile(r"[^\W\d]\w*")
_WORD = re.compile(r"\w+")
_NON_WORD = re.compile(r"\W*")


@dataclass(eq=False)
class Rule:
    """A learned edit or rename (``new``: the new name) and how often the reply made it.
    ``trust``: Laplace's rule of succession."""

    new: str = ""
    held: int = 1
    failed: int = 0

    @property
    def trust(self) -> float:
        return (self.held + 1) / (self.held + self.failed + 2)

    @property
    def active(self) -> bool:
        return self.failed < self.held


class Edit(NamedTuple):
    """An edit made at one place: the tokens ``source`` are written ``output``."""

    source: tuple[int, ...]
    output: tuple[int, ...]
    rule: Rule


class Edits:
    """Learned edits by the first token of their source span, and renames by old name (these
    only with a ``vocab`` to read identifiers). Spans and names are at most ``max_span`` tokens."""

    def __init__(self, vocab: Model | None, max_span: int) -> None:
        self.vocab = vocab
        self.max_span = max_span
        self._text: dict[int, str | None] = {}
        self.clear()

    def clear(self) -> None:
        self._by_first: dict[int, list[Edit]] = {}
        self.renames: dict[str, Rule] = {}
        self._renamed: dict[tuple[int, ...], Edit | None] = {}  # source tokens -> their rename

    def learn(self, tokens: Sequence[int], src: int, out: int, src_end: int, out_end: int) -> None:
        """A copy broke off at ``tokens[src]`` (``tokens[out]`` in the reply), resumed at ``src_end``
        (``out_end``): learn the edit, and the rename if the identifier there reads otherwise."""
        source, output = tuple(tokens[src:src_end]), tuple(tokens[out:out_end])
        if source and len(source) <= self.max_span and len(output) <= self.max_span:
            edits = [e for e in self._by_first.get(source[0], []) if e.source != source]
            edits.append(Edit(source, output, Rule()))
            self._by_first[source[0]] = sorted(edits, key=lambda e: -len(e.source))  # the longest first
        if self.vocab is None:
            return
        while (src > 0 and out > 0 and tokens[src - 1] == tokens[out - 1]
               and (self._continues_word(tokens, src) or self._continues_word(tokens, out))):
            # back to where the word starts: the break came inside it, in the source (``Item``
            # of ``addItem``) or in the reply (``_in`` after ``a``, renaming ``a`` to ``a_in``)
            src, out = src - 1, out - 1
        a, b = self._identifier_at(tokens, src), self._identifier_at(tokens, out)
        if a is not None and b is not None and a[1] == b[1] and a[2] != b[2]:
            if a[2] not in self.renames or self.renames[a[2]].new != b[2]:  # learned again: counts kept
                self.renames[a[2]] = Rule(b[2])
                self._renamed = {}

    def at(self, tokens: Sequence[int], pos: int) -> Edit | None:
        """The active edit whose source starts at ``tokens[pos]``, if any: a learned one (the
        longest), else the rename of the identifier there."""
        for learned in self._by_first.get(tokens[pos], ()):
            if learned.rule.active and tuple(tokens[pos:pos + len(learned.source)]) == learned.source:
                return learned
        ident = self._identifier_at(tokens, pos) if self.renames else None
        if ident is None or self.vocab is None:
            return None
        end, lead, name, trail = ident
        source = tuple(tokens[pos:end])
        if source not in self._renamed:
            self._renamed[source] = None
            rule = self.renames.get(name)
            if rule is not None:
                text = lead + rule.new + trail
                output = tuple(self.vocab.tokenize(text, add_special=False, parse_special=False))
                if output and output != source and len(output) <= self.max_span:
                    self._renamed[source] = Edit(source, output, rule)
        edit = self._renamed[source]
        return edit if edit is not None and edit.rule.active else None

    def _piece(self, token: int) -> str | None:
        """The text of ``token``, or None where it is not whole UTF-8 on its own."""
        if token not in self._text and self.vocab is not None:
            try:
                self._text[token] = self.vocab.piece(token).decode("utf-8")
            except UnicodeDecodeError:
                self._text[token] = None
        return self._text.get(token)

    def _identifier_at(self, tokens: Sequence[int], pos: int) -> tuple[int, str, str, str] | None:
        """(end, lead, name, trail): ``tokens[pos:end]`` render as ``lead + name + trail``, ``lead``
        spaces or punctuation (a token of only those may come first); None inside a word."""
        lead, body, end = "", "", pos
        while not body and end < len(tokens) and end - pos < 2:
            text = self._piece(tokens[end])
            if not text:
                return None
            lead_match = _NON_WORD.match(text)
            skip = lead_match.end() if lead_match else 0
            lead, body, end = lead + text[:skip], text[skip:], end + 1
        match = _IDENT.match(body)
        if match is None or (not lead and self._continues_word(tokens, pos)):
            return None  # no word, a number, or inside a word
        name, trail = match.group(), body[match.end():]
        while not trail and end < len(tokens):
            text = self._piece(tokens[end]) or ""
            more = _WORD.match(text)
            if more is None:
                break
            if end - pos >= self.max_span:
                return None
            name, trail = name + more.group(), text[more.end():]
            end += 1
        return end, lead, name, trail

    def _continues_word(self, tokens: Sequence[int], pos: int) -> bool:
        """Whether ``tokens[pos]`` goes on with a word that ``tokens[pos - 1]`` began."""
        this, before = self._piece(tokens[pos]), self._piece(tokens[pos - 1]) if pos else None
        return bool(this and before and _WORD.match(this) and _WORD.match(before[-1]))
