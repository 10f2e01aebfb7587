"""Tool turns in the chat: a reply's calls in words, and the result of a call as a block.

A call is shown as its tool and its arguments (``timezone: Asia/Tokyo``), not as raw JSON. A
result is untrusted text from a server: it is shown as plain text (never Markdown or HTML),
folded to one line until opened. While a call waits for the person, its block holds the three
answers: *Allow once*, *Always allow* (this tool, saved with the server) and *Deny*.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

from app.control.conversation import Turn
from app.views.message_widget import MessageWidget
from app.views.tool_text import call_line
from engine.chat.messages import ToolCall

PREVIEW_CHARS = 120  # characters of a folded result shown on its line
STATES = {"denied": "denied", "cancelled": "cancelled", "error": "failed"}


def tool_summary(turn: Turn) -> str:
    if turn.streaming:
        return "waiting for you" if turn.ask else "running…"
    state = STATES.get(turn.reason or "")
    n = len(turn.text)
    size = f"{n:,} character{'s' if n != 1 else ''}"
    return f"{state} · {size}" if state else size


def preview(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= PREVIEW_CHARS else line[:PREVIEW_CHARS - 1] + "…"


class ToolTurnWidget(MessageWidget):
    """A tool turn: its call, its state, its result folded; ``answered(str)`` ("once", "always"
    or "deny") when the person answers a call that waits."""

    answered = Signal(str)

    def __init__(self, turn: Turn, call: ToolCall | None, parent: QWidget | None = None) -> None:
        super().__init__(turn, parent)
        self.call = call
        self.role_label.setText(f"Tool · {turn.name or '?'}")
        self.edit_button.setVisible(False)
        self.regen_button.setVisible(False)
        self.call_label = QLabel(self)
        self.call_label.setTextFormat(Qt.TextFormat.PlainText)
        self.call_label.setWordWrap(True)
        self.call_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.call_label.setText(call_line(call) if call is not None else turn.name or "")
        self.fold_button = QToolButton(self)
        self.fold_button.setAutoRaise(True)
        self.fold_button.setCheckable(True)
        self.fold_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.fold_button.toggled.connect(self._fold)
        self.ask_row = QWidget(self)
        row = QHBoxLayout(self.ask_row)
        row.setContentsMargins(0, 4, 0, 0)
        row.addWidget(QLabel("Run this tool?", self.ask_row))
        row.addStretch(1)
        self.buttons: dict[str, QPushButton] = {}
        for key, text, tip in (("once", "Allow once", "Run this call"),
                               ("always", "Always allow", "Run this call and every later call "
                                "of this tool without asking"),
                               ("deny", "Deny", "Do not run it; the model is told")):
            self.buttons[key] = b = QPushButton(text, self.ask_row)
            b.setToolTip(tip)
            b.clicked.connect(lambda _=False, k=key: self._answer(k))
            row.addWidget(b)
        layout = self.layout()
        assert isinstance(layout, QVBoxLayout)
        layout.insertWidget(1, self.call_label)
        layout.insertWidget(2, self.fold_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.ask_row)
        self.body.setVisible(False)

    def refresh(self, highlight_draft: bool) -> None:
        turn = self.turn
        self.meta_label.setText(tool_summary(turn))
        self.ask_row.setVisible(turn.streaming and turn.ask)
        done = not turn.streaming
        self.fold_button.setVisible(done and bool(turn.text))
        if done:
            self._set_fold_text()
            self.body.setPlainText(turn.text)  # untrusted: plain text, never Markdown or HTML
            self.body.setVisible(self.fold_button.isChecked())
        self.continue_button.setVisible(False)

    def _set_fold_text(self) -> None:
        opened = self.fold_button.isChecked()
        self.fold_button.setText("▾ Result" if opened else f"▸ Result: {preview(self.turn.text)}")

    def _fold(self, opened: bool) -> None:
        self.body.setVisible(opened)
        self._set_fold_text()

    def _answer(self, key: str) -> None:
        for b in self.buttons.values():
            b.setEnabled(False)
        self.answered.emit(key)
