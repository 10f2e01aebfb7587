"""Rendering one message into a QTextDocument: Markdown prose, highlighted code, drafted spans.

Prose goes through Qt's Markdown reader (``QTextCursor.insertMarkdown``); each fenced code block
becomes a framed monospace block with a header line holding its language and a ``Copy`` link
(``copy:<n>``, handled by the view's anchorClicked). Drafted spans (character offsets into the
message) get a background tint: inside code by offset, inside prose through the private-use
markers of ``app.markdown.mark``, which are turned into formatting and removed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from PySide6.QtGui import (QColor, QFont, QFontDatabase, QTextCharFormat, QTextCursor,
                           QTextDocument, QTextFrameFormat)

from app.highlight import highlight
from app.markdown import MARK_CLOSE, MARK_OPEN, Block, clip, mark, split_blocks

COPY_SCHEME = "copy"


@dataclass(frozen=True)
class Colors:
    """The colours a rendered message uses (see app.theme for the light and dark sets)."""

    code_bg: QColor
    code_border: QColor
    code_fg: QColor
    keyword: QColor
    string: QColor
    comment: QColor
    number: QColor
    draft_bg: QColor
    muted: QColor
    link: QColor


def monospace_font() -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.Monospace)
    return font


def render(doc: QTextDocument, text: str, colors: Colors, *, spans: Sequence[tuple[int, int]] = (),
           markdown: bool = True) -> list[str]:
    """Replace ``doc``'s content with ``text``; return the code blocks' texts (for Copy links).

    ``spans``: drafted character ranges of ``text`` to tint (empty: no tint). With
    ``markdown=False`` the text is shown as it is (user messages)."""
    doc.clear()
    cursor = QTextCursor(doc)
    if not markdown:
        _insert_plain(cursor, text, 0, spans, QTextCharFormat(), colors)
        return []
    codes: list[str] = []
    first = True
    for block in split_blocks(text):
        if block.kind == "code":
            cursor = _insert_code(doc, cursor, block, spans, colors, len(codes), first)
            codes.append(block.text)
        elif block.text.strip():
            # Prose follows the start of the document or a code frame: either way the cursor
            # already sits in an empty block.
            start = cursor.position()
            rel = clip(spans, block.start, block.start + len(block.text))
            cursor.insertMarkdown(mark(block.text, rel) if rel else block.text)
            if rel:
                _apply_marks(doc, start, colors.draft_bg)
                cursor.movePosition(QTextCursor.MoveOperation.End)
        else:
            continue
        first = False
    return codes


def _apply_marks(doc: QTextDocument, start: int, background: QColor) -> None:
    """Tint the text between each MARK_OPEN/MARK_CLOSE pair after ``start``; delete the marks."""
    tint = QTextCharFormat()
    tint.setBackground(background)
    pos = start
    while True:
        opening = doc.find(MARK_OPEN, pos)
        if opening.isNull():
            return
        closing = doc.find(MARK_CLOSE, opening.position())
        if closing.isNull():  # an unmatched mark (should not happen): just drop it
            opening.removeSelectedText()
            return
        closing.removeSelectedText()
        end = closing.position()
        opening.removeSelectedText()
        span = QTextCursor(doc)
        span.setPosition(opening.position())
        span.setPosition(end - 1, QTextCursor.MoveMode.KeepAnchor)
        span.mergeCharFormat(tint)
        pos = opening.position()


def _insert_code(doc: QTextDocument, cursor: QTextCursor, block: Block,
                 spans: Sequence[tuple[int, int]], colors: Colors, index: int,
                 first: bool) -> QTextCursor:
    frame = QTextFrameFormat()
    frame.setBackground(colors.code_bg)
    frame.setBorder(1)
    frame.setBorderBrush(colors.code_border)
    frame.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
    frame.setPadding(6)
    frame.setTopMargin(2 if first else 6)
    frame.setBottomMargin(6)
    cursor.insertFrame(frame)

    header = QTextCharFormat()
    header.setForeground(colors.muted)
    header.setFontPointSize(max(monospace_font().pointSizeF() - 1, 7))
    cursor.insertText(f"{block.lang or 'code'}    ", header)
    link = QTextCharFormat(header)
    link.setAnchor(True)
    link.setAnchorHref(f"{COPY_SCHEME}:{index}")
    link.setForeground(colors.link)
    link.setFontUnderline(False)
    cursor.insertText("Copy", link)
    cursor.insertText("\n", header)

    base = QTextCharFormat()
    base.setFont(monospace_font())
    base.setForeground(colors.code_fg)
    rel = clip(spans, block.start, block.start + len(block.text))
    _insert_highlighted(cursor, block.text, block.lang, rel, base, colors)
    return doc.rootFrame().lastCursorPosition()


def _insert_highlighted(cursor: QTextCursor, code: str, lang: str,
                        drafted: Sequence[tuple[int, int]], base: QTextCharFormat,
                        colors: Colors) -> None:
    """Insert ``code`` run by run: each run has one syntax colour and one draft state."""
    spans = highlight(code, lang)
    cuts = {0, len(code)}
    for a, b, _ in spans:
        cuts.update((a, b))
    for a, b in drafted:
        cuts.update((a, b))
    formats = {kind: _colored(base, getattr(colors, kind)) for kind in
               ("keyword", "string", "comment", "number")}
    points = sorted(cuts)
    si = 0
    for a, b in zip(points, points[1:]):
        while si < len(spans) and spans[si][1] <= a:
            si += 1
        kind = spans[si][2] if si < len(spans) and spans[si][0] <= a else None
        fmt = QTextCharFormat(formats[kind] if kind else base)
        if any(x <= a < y for x, y in drafted):
            fmt.setBackground(colors.draft_bg)
        cursor.insertText(code[a:b], fmt)


def _insert_plain(cursor: QTextCursor, text: str, offset: int, spans: Sequence[tuple[int, int]],
                  base: QTextCharFormat, colors: Colors) -> None:
    tinted = QTextCharFormat(base)
    tinted.setBackground(colors.draft_bg)
    last = 0
    for a, b in clip(spans, offset, offset + len(text)):
        cursor.insertText(text[last:a], base)
        cursor.insertText(text[a:b], tinted)
        last = b
    cursor.insertText(text[last:], base)


def _colored(base: QTextCharFormat, color: QColor) -> QTextCharFormat:
    fmt = QTextCharFormat(base)
    fmt.setForeground(color)
    return fmt
