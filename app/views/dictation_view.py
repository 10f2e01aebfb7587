"""The microphone button beside the composer, with a level meter: a click starts listening and
the next click stops; held down, it listens until it is let go (push to talk). The transcript
goes into the composer at the cursor, for the person to edit and send: never sent by itself
(app.control.dictation)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QProgressBar, QToolButton, QWidget

from app.control.dictation import Dictation
from app.control.microphone import Microphone

if TYPE_CHECKING:
    from app.views.main_window import MainWindow

HOLD_S = 0.4  # held this long, the button is push to talk: letting go stops
LABELS = {"idle": ("Speak", "Dictate a message: click to start and again to stop, or hold "
                   "while you speak. The words go into the message for you to edit."),
          "listening": ("Stop", "Listening: click (or let go) to stop"),
          "transcribing": ("…", "Turning what you said into text")}


class MicButton(QWidget):
    def __init__(self, dictation: Dictation, parent: QWidget | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(parent)
        self.dictation, self.clock = dictation, clock
        self.button = QToolButton(self)
        self.button.setObjectName("mic")
        self.meter = QProgressBar(self)
        self.meter.setObjectName("micLevel")
        self.meter.setRange(0, 100)
        self.meter.setTextVisible(False)
        self.meter.setFixedSize(8, 40)
        self.meter.setOrientation(Qt.Orientation.Vertical)
        self.meter.setToolTip("The sound coming in")
        self.meter.hide()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.button)
        layout.addWidget(self.meter)
        self._down_at: float | None = None  # when the press that started listening came
        self.button.pressed.connect(self._pressed)
        self.button.released.connect(self._released)
        dictation.state_changed.connect(self._show_state)
        dictation.level.connect(lambda v: self.meter.setValue(round(100 * v)))
        self._show_state(dictation.state)

    def _pressed(self) -> None:
        if self.dictation.state == "idle":
            self._down_at = self.clock()
            self.dictation.start()
        elif self.dictation.state == "listening":  # the click that ends a toggled dictation
            self._down_at = None
            self.dictation.stop()

    def _released(self) -> None:
        down, self._down_at = self._down_at, None
        if down is not None and self.clock() - down >= HOLD_S and self.dictation.state == "listening":
            self.dictation.stop()  # push to talk

    def _show_state(self, state: str) -> None:
        text, tip = LABELS.get(state, LABELS["idle"])
        self.button.setText(text)
        self.button.setToolTip(tip)
        self.button.setEnabled(state != "transcribing")
        self.meter.setVisible(state == "listening")


def insert(edit: QPlainTextEdit, text: str) -> None:
    """``text`` into the composer at its cursor, a space between it and a word before it."""
    cursor = edit.textCursor()
    before = edit.toPlainText()[:cursor.position()]
    cursor.insertText((" " if before and not before[-1].isspace() else "") + text)
    edit.setTextCursor(cursor)
    edit.setFocus()


def connect(window: MainWindow) -> Dictation:
    dictation = Dictation(Microphone, parent=window,
                          language=lambda: window.settings["dictation_language"])
    window.composer.add_tool(MicButton(dictation, window.composer))
    dictation.transcript.connect(lambda text: insert(window.composer.edit, text))
    dictation.failed.connect(window.notice.show_error)
    return dictation
