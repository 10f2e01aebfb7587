"""Text as written: a single newline is a line break in replies and in the user's messages, while
lists, quotes, headings, tables and code blocks render as Markdown makes them. The rendered
document's blocks (and the line breaks inside them) are compared with the source lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument

from app.views.markdown import LINE_BREAK, keep_line_breaks
from app.views.render import render
from app.views.theme import LIGHT_COLORS
from engine.events import Done, Stats

if TYPE_CHECKING:
    from pytestqt.qtbot import QtBot

    from app.views.main_window import MainWindow

HAIKU = "An old silent pond\nA frog jumps into the pond\nSplash! Silence again."


def shown_lines(doc: QTextDocument) -> list[str]:
    """The lines a reader sees: every block, split at its line breaks."""
    lines = []
    block = doc.begin()
    while block.isValid():
        lines += block.text().split(LINE_BREAK)
        block = block.next()
    return lines


def blocks(doc: QTextDocument) -> list[tuple[str, bool]]:
    """(text, whether it is a list item) of every block."""
    out = []
    block = doc.begin()
    while block.isValid():
        out.append((block.text(), block.textList() is not None))
        block = block.next()
    return out


def rendered(text: str) -> QTextDocument:
    doc = QTextDocument()
    render(doc, text, LIGHT_COLORS)
    return doc


def test_a_poem_keeps_its_lines_in_one_paragraph(qapp: object) -> None:
    doc = rendered(HAIKU)
    assert shown_lines(doc) == HAIKU.split("\n")
    assert len(blocks(doc)) == 1  # one paragraph: its lines are close, paragraphs apart


def test_paragraphs_lists_quotes_headings_and_tables_render_as_markdown(qapp: object) -> None:
    text = ("First line\nsecond **bold\nacross** lines.\n\nItems:\n- one\n- two\n  more of two\n\n"
            "> quoted a\n> quoted b\n\n# Title\nunder it\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    assert blocks(rendered(text)) == [
        ("First line\u2028second bold\u2028across lines.", False),
        ("Items:", False),
        ("one", True), ("two\u2028more of two", True),  # a list item's own line, no new bullet
        ("quoted a\u2028quoted b", False),
        ("Title", False), ("under it", False),  # a heading is one line
        ("a", False), ("b", False), ("1", False), ("2", False),  # table cells, as before
        ("", False),  # the block after a table
    ]


def test_code_blocks_are_unchanged(qapp: object) -> None:
    text = "Look:\n```python\nx = 1\n\ny = 2\n```\nDone\nhere."
    lines = shown_lines(rendered(text))
    assert lines == ["Look:", "python    Copy", "x = 1", "", "y = 2", "Done", "here."]


def test_keep_line_breaks_leaves_markdown_structure_alone() -> None:
    assert keep_line_breaks("a\nb") == "a\u2028b"
    assert keep_line_breaks("a\n\nb") == "a\n\nb"
    assert keep_line_breaks("a\n- b\n- c") == "a\n- b\n- c"
    assert keep_line_breaks("# h\nbody") == "# h\nbody"
    assert keep_line_breaks("text\n---") == "text\n---"  # a setext heading stays one
    assert keep_line_breaks("> a\n>> b") == "> a\n>> b"  # another depth: another quote
    assert keep_line_breaks("| a |\n|---|\n| 1 |\n| 2 |") == "| a |\n|---|\n| 1 |\n| 2 |"


def test_the_window_shows_replies_and_messages_with_their_lines(qtbot: QtBot, window: MainWindow) -> None:
    """A reply stored with line breaks, and a message typed with Shift+Enter, keep their lines
    in the real chat view."""
    edit = window.composer.edit
    for i, line in enumerate(("Write a haiku", "about a pond")):
        if i:
            qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
        qtbot.keyClicks(edit, line)
    conv = window.controller.current
    conv.add_user(edit.toPlainText())
    conv.begin_reply()
    conv.finish_reply(Done("stop", HAIKU, (), Stats()))
    user, reply = window.chat_view.widgets
    assert shown_lines(user.body.document()) == ["Write a haiku", "about a pond"]
    assert shown_lines(reply.body.document()) == HAIKU.split("\n")
