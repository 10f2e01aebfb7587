"""Splitting a reply into prose and fenced code blocks, marking drafted spans in prose, and
keeping the prose's line breaks.

A reply is rendered block by block: prose through Qt's Markdown reader, code blocks by Duet
(monospace, highlighted, with a copy link). Offsets are kept so that the character spans of
drafted tokens (offsets into the reply) can be mapped onto each block. A single newline is a
line break, as in every chat app (Markdown would join the lines): ``keep_line_breaks`` makes
each one inside a paragraph a line break within it. Pure Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Private-use characters bracketing a drafted span in prose; the renderer turns them into a
# background colour and deletes them.
MARK_OPEN = "\ue000"
MARK_CLOSE = "\ue001"
_MD_PUNCT = set("*_`~[]()#>|!")

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n`]*$")


@dataclass(frozen=True)
class Block:
    """``kind`` is "prose" or "code"; ``start`` is the offset of ``text`` in the reply.
    ``closed`` is False for a code block whose closing fence has not streamed in yet."""

    kind: str
    text: str
    start: int
    lang: str = ""
    closed: bool = True


def split_blocks(text: str) -> list[Block]:
    """Prose and fenced code blocks (``` or ~~~, CommonMark's opening/closing rule)."""
    blocks: list[Block] = []
    pos = 0  # start of the current line
    prose_start = 0
    fence: tuple[str, int, str, int] | None = None  # (char, length, lang, code start)
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if fence is None:
            m = _FENCE.match(bare)
            if m:
                if pos > prose_start:
                    blocks.append(Block("prose", text[prose_start:pos], prose_start))
                marks = m.group(1)
                fence = (marks[0], len(marks), m.group(2), pos + len(line))
        else:
            char, length, lang, code_start = fence
            stripped = bare.strip()
            if stripped and set(stripped) == {char} and len(stripped) >= length and \
                    len(bare) - len(bare.lstrip(" ")) <= 3:
                code = text[code_start:pos]
                blocks.append(Block("code", _drop_newline(code), code_start, lang))
                fence = None
                prose_start = pos + len(line)
        pos += len(line)
    if fence is not None:
        _, _, lang, code_start = fence
        blocks.append(Block("code", text[code_start:], code_start, lang, closed=False))
    elif pos > prose_start:
        blocks.append(Block("prose", text[prose_start:pos], prose_start))
    return blocks


def _drop_newline(code: str) -> str:
    return code[:-1] if code.endswith("\n") else code


def clip(spans: Iterable[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """The parts of ``spans`` inside ``[start, end)``, made relative to ``start``."""
    out = []
    for a, b in spans:
        a, b = max(a, start), min(b, end)
        if a < b:
            out.append((a - start, b - start))
    return out


def mark(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with MARK_OPEN/MARK_CLOSE around each span (relative offsets, sorted).

    A boundary that would split a run of Markdown punctuation (``**``, a backtick fence) is
    moved so the Markdown still parses; a span that shrinks to nothing is dropped.
    """
    out: list[str] = []
    last = 0
    for a, b in spans:
        a, b = _settle(text, a, +1), _settle(text, b, -1)
        if a >= b or a < last or not text[a:b].strip("".join(_MD_PUNCT) + " \t\n"):
            continue
        out += [text[last:a], MARK_OPEN, text[a:b], MARK_CLOSE]
        last = b
    out.append(text[last:])
    return "".join(out)


_LINE_PREFIX = re.compile(r"[ \t]*(?:(?:[-*+>]|#{1,6}|\d{1,9}[.)])(?=[ \t]|$))?[ \t]*")


def _end(pattern: re.Pattern[str], text: str, pos: int = 0) -> int:
    """Where ``pattern`` (one that may match nothing) stops matching at ``pos``."""
    m = pattern.match(text, pos)
    return m.end() if m else pos


def _settle(text: str, i: int, step: int) -> int:
    """Move a marker position off Markdown syntax: out of a line's block prefix (list bullet,
    heading, quote) and out of a run of punctuation. ``step``: +1 for an opening marker."""
    line_start = text.rfind("\n", 0, i) + 1
    prefix_end = _end(_LINE_PREFIX, text, line_start)
    if line_start <= i < prefix_end or (i == prefix_end and step < 0 and i > line_start):
        i = prefix_end if step > 0 else max(line_start - 1, 0)
    while 0 < i < len(text) and text[i - 1] in _MD_PUNCT and text[i] in _MD_PUNCT:
        i += step
    return i



LINE_BREAK = "\u2028"  # Unicode's line separator: a line break inside a Qt text block
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
# a line that starts a block of its own (a list item, a heading, a rule or setext underline,
# raw HTML) rather than continuing the paragraph above it
_BLOCK_START = re.compile(r"^ {0,3}(?:(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)|#{1,6}(?:[ \t]|$)|"
                          r"(?:[-*_=][ \t]*){3,}$|=+[ \t]*$|-+[ \t]*$|<)")
_ONE_LINE_BLOCK = re.compile(r"^ {0,3}(?:#{1,6}(?:[ \t]|$)|(?:[-*_][ \t]*){3,}$)")
_QUOTE = re.compile(r"^(?: {0,3}>[ \t]?)+")


def keep_line_breaks(prose: str) -> str:
    """``prose`` with each newline inside a paragraph (a list item, a quote) made a line break
    within it (LINE_BREAK), so that the lines show as written; Markdown would join them.

    A newline stays where Markdown gives it a meaning: around blank lines, before a line that
    starts a block (a list item, a heading, a rule), after a one-line block (a heading), in
    tables (each row is a line), and between quote lines of different depths."""
    lines = prose.split("\n")
    table = _table_lines(lines)
    out = [lines[0]] if lines else []
    for i in range(1, len(lines)):
        prev, line = lines[i - 1], lines[i]
        joined = _continues(prev, line) and i - 1 not in table and i not in table
        if joined:
            depth = _quote_depth(prev)
            out[-1] += LINE_BREAK + (line[_end(_QUOTE, line):] if depth else line).lstrip()
        else:
            out.append(line)
    return "\n".join(out)


def _continues(prev: str, line: str) -> bool:
    """Whether ``line`` continues the paragraph ``prev`` ends (Markdown's soft break)."""
    if not prev.strip() or not line.strip() or _ONE_LINE_BLOCK.match(prev):
        return False
    depth = _quote_depth(prev)
    if _quote_depth(line) != depth:
        return False
    body = line[_end(_QUOTE, line):] if depth else line
    return not body.strip() == "" and not _BLOCK_START.match(body)


def _quote_depth(line: str) -> int:
    m = _QUOTE.match(line)
    return m.group().count(">") if m else 0


def _table_lines(lines: Sequence[str]) -> set[int]:
    """The indices of the lines that belong to GitHub tables (header, delimiter, rows)."""
    rows: set[int] = set()
    i = 1
    while i < len(lines):
        if "|" in lines[i - 1] and "-" in lines[i] and _TABLE_DELIMITER.match(lines[i]):
            rows.update((i - 1, i))
            i += 1
            while i < len(lines) and lines[i].strip():
                rows.add(i)
                i += 1
        i += 1
    return rows
