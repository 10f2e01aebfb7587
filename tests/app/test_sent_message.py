"""A person's sent message as they wrote it: its text with every indentation kept (Markdown only
in its fenced code blocks), and the files it carried, as chips that open the text the model saw."""

from __future__ import annotations

import inspect
import textwrap

from PySide6.QtWidgets import QDialog, QPlainTextEdit

from app.control.conversation import Turn
from app.views.message_widget import MessageWidget
from engine.chat.messages import Attachment

GARDEN = Attachment("garden.txt", "text", "ab" * 32, "Tomatoes by the south wall.\n" * 40, (), "whole")
MANUAL = Attachment("manual.pdf", "pdf", "cd" * 32, "Page one.\fPage two.", (0, 10))


def _shown(qtbot, turn: Turn) -> MessageWidget:
    widget = MessageWidget(turn)
    qtbot.addWidget(widget)
    widget.refresh(highlight_draft=True)
    return widget


def test_pasted_code_keeps_its_indentation(qtbot) -> None:
    source = inspect.getsource(textwrap)
    module = source[:7000]  # 7,000 characters of a Python module, pasted
    widget = _shown(qtbot, Turn("user", source))
    shown = widget.body.toPlainText()
    assert "        if self.expand_tabs:\n            text = text.expandtabs(self.tabsize)" in shown
    assert _shown(qtbot, Turn("user", module)).body.toPlainText() == module  # all of it, as written


def test_a_persons_markup_is_shown_as_written_but_fenced_code_is_framed(qtbot) -> None:
    text = "Why does *this* fail?\n# not a heading\n\n```python\ndef f():\n    return 1\n```\nThanks"
    widget = _shown(qtbot, Turn("user", text))
    assert widget.body.codes == ["def f():\n    return 1"]  # a code frame with its Copy link
    shown = widget.body.toPlainText()
    assert "Why does *this* fail?\n# not a heading" in shown and "    return 1" in shown
    assert shown.rstrip().endswith("Thanks")


def test_a_reply_is_still_markdown(qtbot) -> None:
    widget = _shown(qtbot, Turn("assistant", "Use **this** one."))
    assert widget.body.toPlainText() == "Use this one."


def test_the_sent_message_shows_its_files_and_opens_their_text(qtbot) -> None:
    widget = _shown(qtbot, Turn("user", "What grows by the wall?", attachments=(GARDEN, MANUAL)))
    chips = widget.files.chips
    assert [c.text() for c in chips] == [f"garden.txt · {len(GARDEN.text):,} characters · whole",
                                         f"manual.pdf · {len(MANUAL.text):,} characters · 2 pages"]
    assert not widget.files.isHidden()
    chips[0].click()
    dialog = widget.files.findChild(QDialog, "attachment-text")
    assert dialog is not None and dialog.windowTitle().startswith("garden.txt")
    assert dialog.findChild(QPlainTextEdit).toPlainText() == GARDEN.text
    assert _shown(qtbot, Turn("user", "No files here.")).files.isHidden()

