"""Rendering one message into a QTextDocument: Markdown prose, highlighted code, drafted spans.

Prose goes through Qt's Markdown reader (``QTextCursor.insertMarkdown``); each fenced code block
becomes a framed monospace block with a header line holding its language and a ``Copy`` link
(``copy:<n>``, handled by the view's anchorClicked). Drafted spans (character offsets into the
message) get a mark, a dotted underline over a tint (syntax colours give way to the code's own
colour on it, for contrast), on text only (never on indentation or other whitespace in code):
inside code by offset, inside prose through the private-use markers of ``app.views.markdown.mark``,
which are turned into formatting and removed here.
A single newline is a line break (``app.views.markdown.keep_line_breaks``). A person's own
messages are shown as written (``plain_prose``): their prose as plain text, every space and
indentation kept (pasted code reads as it was written), and only their fenced code blocks framed
and highlighted; Markdown elsewhere would eat indentation and make ``*`` or ``#`` markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFrameFormat,
)

from app.views.highlight import highlight
from app.views.markdown import MARK_CLOSE, MARK_OPEN, Block, clip, keep_line_breaks, mark, split_blocks

COPY_SCHEME = "copy"
_FEATURES = QTextDocument.MarkdownFeature.MarkdownDialectGitHub
_FEATURES_NO_HTML = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value
    | QTextDocument.MarkdownFeature.MarkdownNoHTML.value)


@dataclass(frozen=True)
class Colors:
    """The colours a rendered message uses (see app.views.theme for the light and dark sets)."""

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
    draft_line: QColor  # the underline of drafted text


def draft_format(colors: Colors, base: QTextCharFormat | None = None) -> QTextCharFormat:
    """The mark of drafted text: a dotted underline in ``draft_line`` over the ``draft_bg`` tint."""
    fmt = QTextCharFormat(base) if base is not None else QTextCharFormat()
    fmt.setBackground(colors.draft_bg)
    fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
    fmt.setUnderlineColor(colors.draft_line)
    return fmt


def monospace_font() -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.Monospace)
    return font


class Renderer:
    """Renders one message into ``doc``. Streaming calls ``render`` again with a longer text:
    the blocks (prose or code) that did not change are kept and only the rest is rebuilt, so
    an update costs about the size of the last block rather than of the whole reply."""

    def __init__(self, doc: QTextDocument) -> None:
        self.doc = doc
        doc.setUndoRedoEnabled(False)  # read-only text: an undo stack would only grow
        self._done: list[tuple[object, int]] = []  # (what was rendered, where it starts)
        self._mode: object = None
        self.rebuilt_chars = 0  # characters of text the last ``render`` rebuilt
        self._features = _FEATURES
        self._plain_prose = False

    def render(self, text: str, colors: Colors, *, spans: Sequence[tuple[int, int]] = (),
               markdown: bool = True, html: bool = True, plain_prose: bool = False) -> list[str]:
        """Show ``text``; return the code blocks' texts (for the Copy links).

        ``spans``: drafted character ranges of ``text`` to tint (empty: no tint). With
        ``markdown=False`` the text is shown as it is; ``html=False``: HTML in the Markdown is
        shown as text; ``plain_prose``: only fenced code blocks are Markdown, the rest is shown
        as written (a person's messages)."""
        # One edit block: the layout hears of the whole change once, not of every insertion.
        edit = QTextCursor(self.doc)
        edit.beginEditBlock()
        try:
            self._features = _FEATURES if html else _FEATURES_NO_HTML
            self._plain_prose = plain_prose
            return self._render(text, colors, spans, markdown)
        finally:
            edit.endEditBlock()

    def _render(self, text: str, colors: Colors, spans: Sequence[tuple[int, int]],
                markdown: bool) -> list[str]:
        doc = self.doc
        if not markdown:
            _clear(doc)
            self._done, self._mode = [], None
            _insert_plain(QTextCursor(doc), text, spans, colors)
            self.rebuilt_chars = len(text)
            return []
        blocks = split_blocks(text)
        keys = [(b, tuple(clip(spans, b.start, b.start + len(b.text)))) for b in blocks]
        keep = 0
        mode = (id(colors), colors.draft_bg.rgba(), self._features, self._plain_prose)
        if mode == self._mode:
            while keep < min(len(keys), len(self._done)) and self._done[keep][0] == keys[keep]:
                keep += 1
        cursor = QTextCursor(doc)
        if keep == 0:
            _clear(doc)
        else:
            cursor.setPosition(self._done[keep][1] if keep < len(self._done)
                               else doc.characterCount() - 1)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            _reset_block(cursor)
        del self._done[keep:]
        self._mode = mode
        self.rebuilt_chars = sum(len(b.text) for b in blocks[keep:])
        first = not any(b.kind == "code" or b.text.strip() for b in blocks[:keep])
        for index in range(keep, len(blocks)):
            block, rel = blocks[index], keys[index][1]
            self._done.append((keys[index], cursor.position()))
            if block.kind == "code":
                cursor = _insert_code(doc, cursor, block, rel, colors,
                                      sum(b.kind == "code" for b in blocks[:index]), first)
            elif block.text.strip() and self._plain_prose:
                body = block.text.strip("\n")  # the frames around it separate it already
                lead = block.start + len(block.text) - len(block.text.lstrip("\n"))
                _insert_plain(cursor, body, clip(spans, lead, lead + len(body)), colors)
            elif block.text.strip():
                # Prose follows the start of the document or a code frame: either way the
                # cursor already sits in an empty block.
                start = cursor.position()
                body = block.text.lstrip("\n")  # blank lines after a fence: no empty paragraph
                lead = block.start + len(block.text) - len(body)
                clipped = clip(spans, lead, lead + len(body))
                cursor.insertMarkdown(keep_line_breaks(mark(body, clipped) if clipped else body),
                                      self._features)
                if rel:
                    _apply_marks(doc, start, colors)
                    cursor.movePosition(QTextCursor.MoveOperation.End)
            else:
                continue
            first = False
        return [b.text for b in blocks if b.kind == "code"]


def _clear(doc: QTextDocument) -> None:
    """Empty ``doc`` inside the current edit block (``QTextDocument.clear`` would end it)."""
    cursor = QTextCursor(doc)
    cursor.select(QTextCursor.SelectionType.Document)
    cursor.removeSelectedText()
    _reset_block(cursor)


def _reset_block(cursor: QTextCursor) -> None:
    """Make the (now empty) block at ``cursor`` plain again: what the removed text had made it
    (a list item, a heading, a quote) must not leak into what is inserted next."""
    if cursor.block().length() > 1:
        return  # the end of a kept paragraph: a code frame follows it, keep its format
    text_list = cursor.currentList()
    if text_list is not None:
        text_list.remove(cursor.block())
    cursor.setBlockFormat(QTextBlockFormat())
    cursor.setBlockCharFormat(QTextCharFormat())
    cursor.setCharFormat(QTextCharFormat())


def render(doc: QTextDocument, text: str, colors: Colors, *, spans: Sequence[tuple[int, int]] = (),
           markdown: bool = True) -> list[str]:
    """Render ``text`` into ``doc`` from scratch (see ``Renderer.render``)."""
    return Renderer(doc).render(text, colors, spans=spans, markdown=markdown)


def _apply_marks(doc: QTextDocument, start: int, colors: Colors) -> None:
    """Tint the text between each MARK_OPEN/MARK_CLOSE pair after ``start``; delete the marks.

    One pass over the blocks finds the marks; they are then handled from the last to the
    first, so that deleting a mark never moves the positions still to be handled."""
    marks: list[tuple[int, str]] = []
    block = doc.findBlock(start)
    while block.isValid():
        text, base = block.text(), block.position()
        for i, ch in enumerate(text):
            if ch == MARK_OPEN or ch == MARK_CLOSE:
                marks.append((base + i, ch))
        block = block.next()
    tint = draft_format(colors)
    cursor = QTextCursor(doc)
    pending_close: int | None = None
    for pos, ch in reversed(marks):
        if ch == MARK_CLOSE:
            pending_close = pos
            cursor.setPosition(pos)
            cursor.setPosition(pos + 1, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            continue
        cursor.setPosition(pos)
        cursor.setPosition(pos + 1, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if pending_close is not None and pending_close - 1 > pos:
            cursor.setPosition(pos)
            cursor.setPosition(pending_close - 1, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(tint)
        pending_close = None


def _insert_code(doc: QTextDocument, cursor: QTextCursor, block: Block,
                 drafted: Sequence[tuple[int, int]], colors: Colors, index: int,
                 first: bool) -> QTextCursor:
    """A framed code block with a header (language, Copy link); ``drafted`` is relative."""
    frame = QTextFrameFormat()
    frame.setBackground(colors.code_bg)
    frame.setBorder(1)
    frame.setBorderBrush(colors.code_border)
    frame.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
    frame.setPadding(6)
    frame.setTopMargin(2 if first else 6)
    frame.setBottomMargin(6)
    if first and cursor.position() == 0:
        # The document's first block stays empty above a leading frame: make it take no room.
        flat = QTextBlockFormat()
        flat.setLineHeight(0, QTextBlockFormat.LineHeightTypes.FixedHeight.value)
        cursor.setBlockFormat(flat)
        small = QTextCharFormat()
        small.setFontPointSize(1)
        cursor.setBlockCharFormat(small)
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
    _insert_highlighted(cursor, block.text, block.lang, drafted, base, colors)
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
    si = di = 0
    for a, b in zip(points, points[1:]):
        while si < len(spans) and spans[si][1] <= a:
            si += 1
        while di < len(drafted) and drafted[di][1] <= a:
            di += 1
        kind = spans[si][2] if si < len(spans) and spans[si][0] <= a else None
        fmt = QTextCharFormat(formats[kind] if kind else base)
        if di < len(drafted) and drafted[di][0] <= a:  # on the tint: the code's own colour
            _insert_marked(cursor, code[a:b], _colored(base, colors.code_fg), colors)
        else:
            cursor.insertText(code[a:b], fmt)


_WORDS = re.compile(r"\s+|\S+")


def _insert_marked(cursor: QTextCursor, text: str, fmt: QTextCharFormat, colors: Colors) -> None:
    """Drafted ``text``: its words marked, its whitespace (indentation) left plain."""
    marked = draft_format(colors, fmt)
    for m in _WORDS.finditer(text):
        cursor.insertText(m.group(), fmt if m.group().isspace() else marked)


def _insert_plain(cursor: QTextCursor, text: str, spans: Sequence[tuple[int, int]],
                  colors: Colors) -> None:
    base = QTextCharFormat()
    last = 0
    for a, b in clip(spans, 0, len(text)):
        cursor.insertText(text[last:a], base)
        _insert_marked(cursor, text[a:b], base, colors)
        last = b
    cursor.insertText(text[last:], base)


def _colored(base: QTextCharFormat, color: QColor) -> QTextCharFormat:
    fmt = QTextCharFormat(base)
    fmt.setForeground(color)
    return fmt
