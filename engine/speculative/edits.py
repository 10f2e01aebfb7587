"""Edits a reply makes to the text it copies, learned at one occurrence to draft the next ones.

When a copy breaks off and resumes a little further on in its source, the reply has replaced a
short source span by a short span of its own (``x`` by ``x: int``, ``foo`` by ``bar``). Such
edits recur, so the n-gram drafter applies the ones it has learned while it copies. An edit the
reply then does not make loses trust, and one that failed more often than it held is dropped.

Given the tokenizer, an edit inside an identifier also teaches a rename: ``item`` renamed
``entry`` recurs as `` item``, ``(item`` and ``[item``, different tokens each, so the rename is
learned on the identifier's text and applied wherever that name starts, re-tokenized.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Edit", "EditMemory", "Vocab"]

_IDENT = re.compile(r"[^\W\d]\w*")
_WORD = re.compile(r"\w+")
_NON_WORD = re.compile(r"\W*")


class Vocab(Protocol):
    """What renames need of a tokenizer (engine.model.Model provides it)."""

    def piece(self, token: int) -> bytes: ...

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]: ...


@dataclass(eq=False)
class Rule:
    """A learned edit or rename, and how often the reply made it since: the occurrence it was
    learned from counts as one. ``trust`` is Laplace's rule of succession."""

    held: int = 1
    failed: int = 0

    @property
    def trust(self) -> float:
        return (self.held + 1) / (self.held + self.failed + 2)

    @property
    def active(self) -> bool:
        return self.failed <= self.held


@dataclass(eq=False)
class Edit(Rule):
    """The reply writes ``output`` where its source has ``source`` (counted on ``rename`` if
    the edit applies one)."""

    source: tuple[int, ...] = ()
    output: tuple[int, ...] = ()
    rename: Rule | None = None

    @property
    def counts(self) -> Rule:
        return self.rename if self.rename is not None else self


class EditMemory:
    """Learned edits by the first token of their source, and renames by the old name (these
    only with a ``vocab`` to read identifiers). Spans and names are at most ``max_span`` tokens."""

    def __init__(self, vocab: Vocab | None, max_span: int) -> None:
        self.vocab = vocab
        self.max_span = max_span
        self._text: dict[int, str | None] = {}
        self.clear()

    def clear(self) -> None:
        self._by_first: dict[int, list[Edit]] = {}
        self.renames: dict[str, tuple[str, Rule]] = {}
        self._renamed: dict[tuple[int, ...], Edit | None] = {}  # source span -> its rename edit

    def learn(self, source: Sequence[int], output: Sequence[int]) -> None:
        """The reply wrote ``output`` for ``source`` (the latest edit of a span wins)."""
        source, output = tuple(source), tuple(output)
        if source and len(source) <= self.max_span and len(output) <= self.max_span and source != output:
            edits = [e for e in self._by_first.get(source[0], []) if e.source != source]
            edits.append(Edit(source=source, output=output))
            edits.sort(key=lambda e: -len(e.source))  # the longest span that matches wins
            self._by_first[source[0]] = edits

    def learn_rename(self, tokens: Sequence[int], src: int, out: int) -> None:
        """The reply made an edit at ``tokens[out]`` to the source at ``tokens[src]``: if the
        identifier there has another name in the reply, learn the rename."""
        if self.vocab is None:
            return
        while (src > 0 and out > 0 and tokens[src - 1] == tokens[out - 1]
               and (self._continues_word(tokens, src) or self._continues_word(tokens, out))):
            # back to where the word starts: the edit began inside it, in the source (``Item``
            # of ``addItem``) or in the reply (``_in`` after ``a``, renaming ``a`` to ``a_in``)
            src, out = src - 1, out - 1
        a, b = self._identifier_at(tokens, src), self._identifier_at(tokens, out)
        if a is not None and b is not None and a[1] == b[1] and a[2] != b[2]:
            if self.renames.get(a[2], ("",))[0] != b[2]:  # a rename learned again keeps its counts
                self.renames[a[2]] = (b[2], Rule())
                self._renamed = {}

    def at(self, tokens: Sequence[int], pos: int) -> Edit | None:
        """The active edit whose source starts at ``tokens[pos]``, if any: a learned one, else
        the rename of the identifier there."""
        for edit in self._by_first.get(tokens[pos], ()):
            if edit.active and tuple(tokens[pos:pos + len(edit.source)]) == edit.source:
                return edit
        return self._rename_at(tokens, pos) if self.renames else None

    @staticmethod
    def confirm(edit: Edit, held: bool) -> None:
        if held:
            edit.counts.held += 1
        else:
            edit.counts.failed += 1

    def _rename_at(self, tokens: Sequence[int], pos: int) -> Edit | None:
        ident = self._identifier_at(tokens, pos)
        if ident is None:
            return None
        end, lead, name, trail = ident
        source = tuple(tokens[pos:end])
        if source not in self._renamed:
            self._renamed[source] = None
            if name in self.renames:
                new, rule = self.renames[name]
                output = tuple(self.vocab.tokenize(lead + new + trail, add_special=False, parse_special=False))
                if output and output != source and len(output) <= self.max_span:
                    self._renamed[source] = Edit(source=source, output=output, rename=rule)
        edit = self._renamed[source]
        return edit if edit is not None and edit.counts.active else None

    def _piece(self, token: int) -> str | None:
        """The text of ``token``, or None where it is not whole UTF-8 on its own."""
        if token not in self._text:
            try:
                self._text[token] = self.vocab.piece(token).decode("utf-8")
            except UnicodeDecodeError:
                self._text[token] = None
        return self._text[token]

    def _identifier_at(self, tokens: Sequence[int], pos: int) -> tuple[int, str, str, str] | None:
        """(end, lead, name, trail) of the identifier that starts in ``tokens[pos]`` (after any
        punctuation or spaces there, or in the next token after a token of only those), where
        ``tokens[pos:end]`` render as ``lead + name + trail``; None if ``pos`` is inside a word
        or no word starts there."""
        lead, body, end = "", "", pos
        while not body and end < len(tokens) and end - pos < 2:
            text = self._piece(tokens[end])
            if not text:
                return None
            skip = _NON_WORD.match(text).end()
            lead, body, end = lead + text[:skip], text[skip:], end + 1
        if not body or body[0].isdigit() or (not lead and self._continues_word(tokens, pos)):
            return None
        match = _IDENT.match(body)
        name, trail = match.group(), body[match.end():]
        while not trail and end < len(tokens):
            more = _WORD.match(self._piece(tokens[end]) or "")
            if more is None:
                break
            if end - pos >= self.max_span:
                return None
            name, trail = name + more.group(), self._piece(tokens[end])[more.end():]
            end += 1
        return end, lead, name, trail

    def _continues_word(self, tokens: Sequence[int], pos: int) -> bool:
        """Whether ``tokens[pos]`` goes on with a word that ``tokens[pos - 1]`` began."""
        this, before = self._piece(tokens[pos]), self._piece(tokens[pos - 1]) if pos else None
        return bool(this and before and _WORD.match(this) and _WORD.match(before[-1]))
