"""Identifier rules a reply applies to its source, learned from one edit to draft the rest.

* **Styles.** Asked to rename methods to snake_case, a reply writes ``add_item`` for
  ``addItem``, then ``remove_item`` for ``removeItem``: each name is new, so no learned token
  edit (engine.speculative.edits) predicts the next one, but the rule that made them does. When an
  edit turns one identifier into its snake_case (or camelCase) form, the n-gram drafter learns
  that style, and while copying it drafts every later identifier of the source's style
  converted.
* **Renames.** A variable renamed ``item`` to ``entry`` recurs as `` item``, ``(item``,
  ``[item`` and ``{item``: four different tokens, so a token edit learned at one occurrence
  misses the others. A rename learned on the identifier applies to all of them.

Trust is counted as for edits: a rule the reply stops applying is dropped.

A rename the user states in the prompt (``addItem -> add_item``, "rename `item` to `entry`") is
known before the reply makes it, so it is learned from the prompt (``stated_renames``) and
drafted from its first occurrence on, with the same trust as one the reply made.

This works on text: the identifier under a source position is read from the tokens' pieces,
converted, and the converted text is tokenized again (the target usually tokenizes it the same
way; where it does not, the draft is simply rejected there).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["STYLES", "Style", "StyleRule", "Vocab", "Words", "camel_to_snake", "renamed", "snake_to_camel",
           "stated_renames", "trust"]

MAX_TOKENS = 8  # longest identifier (in tokens) a rule is applied to
_IDENT = re.compile(r"[^\W\d]\w*")
_WORD = re.compile(r"\w+")
_NON_WORD = re.compile(r"\W*")
_LOWER_CAMEL = re.compile(r"[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+")
_LOWER_SNAKE = re.compile(r"_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+")


_Q = r"[`'\"]?"
_STATED = (
    re.compile(rf"{_Q}([^\W\d]\w*){_Q}\s*(?:->|→|=>)\s*{_Q}([^\W\d]\w*){_Q}"),  # a -> b
    re.compile(r"\brenam\w*\b[^\n.]{0,60}?`([^\W\d]\w*)`\s+(?:to|into|as)\s+`([^\W\d]\w*)`", re.I),
)


def stated_renames(text: str) -> list[tuple[str, str]]:
    """Renames ``text`` states: ``old -> new`` (or ``→``, ``=>``), and "rename `old` to `new`"
    (backquoted, so that prose such as "rename it to match" is not taken for one)."""
    found = [m.groups() for pattern in _STATED for m in pattern.finditer(text)]
    return [(old, new) for old, new in found if old != new]


class Vocab(Protocol):
    """What the drafter needs of a tokenizer (engine.model.Model provides it)."""

    def piece(self, token: int) -> bytes: ...

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]: ...


def camel_to_snake(name: str) -> str | None:
    """``findByTag`` → ``find_by_tag``, ``parseHTTPReply`` → ``parse_http_reply``; None unless
    ``name`` is lowerCamelCase (a class name or a constant keeps its style)."""
    if not _LOWER_CAMEL.fullmatch(name):
        return None
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def snake_to_camel(name: str) -> str | None:
    """``find_by_tag`` → ``findByTag`` (a leading underscore is kept); None unless ``name`` is
    lower snake_case with at least one inner underscore."""
    if not _LOWER_SNAKE.fullmatch(name):
        return None
    lead = "_" if name.startswith("_") else ""
    first, *rest = name[len(lead):].split("_")
    return lead + first + "".join(p.capitalize() for p in rest)


@dataclass(frozen=True)
class Style:
    """A conversion of identifiers; ``renames`` names the one identifier a rename applies to."""

    name: str
    convert: Callable[[str], str | None]
    renames: str | None = None


STYLES = (Style("snake_case", camel_to_snake), Style("camelCase", snake_to_camel))


def _rename(old: str, new: str, name: str) -> str | None:
    return new if name == old else None


def renamed(old: str, new: str) -> Style:
    """The rename of identifier ``old`` to ``new`` (and of nothing else)."""
    return Style(f"{old} -> {new}", functools.partial(_rename, old, new), renames=old)


def trust(held: int, failed: int) -> float:
    """Estimated probability that a learned edit or rule holds at its next use."""
    return (held + 1.0) / (held + failed + 1.5)


@dataclass(eq=False)
class StyleRule:
    """A style or rename the reply has applied: how often its drafted conversions held or failed."""

    style: Style
    held: int = 0
    failed: int = 0

    @property
    def trust(self) -> float:
        return trust(self.held, self.failed)

    @property
    def active(self) -> bool:
        return self.failed <= self.held


@dataclass(frozen=True)
class Identifier:
    """An identifier that starts at a token position and ends before token ``end``: the tokens
    render as ``lead + name + trail``."""

    end: int
    lead: str
    name: str
    trail: str


class Words:
    """Identifiers read from token pieces (pieces decoded once and cached)."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        self._text: dict[int, str | None] = {}

    def text(self, token: int) -> str | None:
        """The piece of ``token`` as text, or None where it is not whole UTF-8 on its own."""
        if token not in self._text:
            try:
                self._text[token] = self.vocab.piece(token).decode("utf-8")
            except UnicodeDecodeError:
                self._text[token] = None
        return self._text[token]

    def tokenize(self, text: str) -> tuple[int, ...]:
        return tuple(self.vocab.tokenize(text, add_special=False, parse_special=False))

    def identifier_at(self, tokens: Sequence[int], pos: int) -> Identifier | None:
        """The identifier that starts in ``tokens[pos]`` (after any punctuation or spaces there,
        or in the next token after a token of only those) and runs through the following tokens,
        or None (``pos`` is inside a word, or no word starts there)."""
        lead, body, end = "", "", pos
        while not body and end < len(tokens) and end - pos < 2:
            text = self.text(tokens[end])
            if not text:
                return None
            skip = _NON_WORD.match(text).end()
            lead, body, end = lead + text[:skip], text[skip:], end + 1
        if not body or body[0].isdigit():
            return None  # no word, or a number
        if not lead and self.continues_word(tokens, pos):
            return None  # the word began earlier
        match = _IDENT.match(body)
        name, trail = match.group(), body[match.end():]
        while not trail and end < len(tokens):
            nxt = self.text(tokens[end])
            more = _WORD.match(nxt) if nxt else None
            if more is None:
                break
            if end - pos >= MAX_TOKENS:
                return None  # too long to be a name a style converts
            name, trail = name + more.group(), nxt[more.end():]
            end += 1
        return Identifier(end, lead, name, trail)

    def continues_word(self, tokens: Sequence[int], pos: int) -> bool:
        """Whether ``tokens[pos]`` goes on with a word that ``tokens[pos - 1]`` began."""
        if pos == 0:
            return False
        this, before = self.text(tokens[pos]), self.text(tokens[pos - 1])
        return bool(this and before and _WORD.match(this) and _WORD.match(before[-1]))
