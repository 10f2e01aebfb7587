"""One message of the chat: its role, a one-line summary of how the reply went, its actions
(Copy; Edit for user messages; Regenerate for replies; Continue after a length cut; ‹ 2/3 ›
between versions), its text (a reply's rendered as Markdown, a person's shown as written but for
its fenced code; code blocks carry their own Copy link) and the files a person's message carried.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from PySide6.QtCore import QSize, QSizeF, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QWheelEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.control.conversation import Turn
from app.views import theme
from app.views.attachments import SentFiles
from app.views.render import COPY_SCHEME, Renderer
from app.views.tool_text import calls_text

ROLE_NAMES = {"user": "You", "assistant": "Duet", "system": "System"}
MIN_REFRESH_S = 1 / 30
REASONS = {"length": "length limit", "context_full": "context full", "cancelled": "stopped",
           "error": "failed", "worker_lost": "cut: an RPC worker went away"}


class MessageBody(QTextBrowser):
    """A read-only rich text area as tall as its content (the outer view scrolls)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.codes: list[str] = []
        self.setOpenLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.anchorClicked.connect(self._on_anchor)
        self.setFixedHeight(24)

    def _fit(self, size: QSizeF) -> None:
        height = math.ceil(size.height()) + 2 * self.frameWidth()
        if height != self.height():
            self.setFixedHeight(height)

    def sizeHint(self) -> QSize:
        return QSize(400, self.height())

    def wheelEvent(self, event: QWheelEvent) -> None:  # let the outer view scroll
        event.ignore()

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME:
            try:
                QGuiApplication.clipboard().setText(self.codes[int(url.path())])
            except (ValueError, IndexError):
                pass
        elif url.scheme() in ("http", "https"):
            QDesktopServices.openUrl(url)


class MessageWidget(QFrame):
    edit_submitted = Signal(str)
    regenerate = Signal()
    switch = Signal(int)  # -1: the previous version, +1: the next
    continue_ = Signal()

    def __init__(self, turn: Turn, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.turn = turn
        self.setObjectName(f"{turn.role}Message")
        self.role_label = QLabel(ROLE_NAMES.get(turn.role, turn.role))
        bold = self.role_label.font()
        bold.setBold(True)
        self.role_label.setFont(bold)
        self.meta_label = QLabel()
        self.meta_label.setObjectName("messageMeta")
        self.copy_button = self._tool("Copy", "Copy the message", self._copy)
        self.edit_button = self._tool("Edit", "Edit this message and send it again",
                                      self._start_edit)
        self.regen_button = self._tool("Regenerate", "Generate this reply again",
                                       self.regenerate.emit)
        self.continue_button = self._tool("Continue", "Go on with this reply (it stopped at the "
                                          "length limit)", self.continue_.emit)
        self.edit_button.setVisible(turn.role == "user")
        self.regen_button.setVisible(turn.role == "assistant")
        self.continue_button.setVisible(False)
        self.prev_button = self._tool("‹", "The previous version", lambda: self.switch.emit(-1))
        self.next_button = self._tool("›", "The next version", lambda: self.switch.emit(1))
        self.version_label = QLabel()
        self.version_label.setObjectName("messageMeta")
        self.set_versions(1, 1)

        header = QHBoxLayout()
        header.setContentsMargins(0, 0, 0, 0)
        header.addWidget(self.role_label)
        header.addWidget(self.prev_button)
        header.addWidget(self.version_label)
        header.addWidget(self.next_button)
        header.addWidget(self.meta_label, 1)
        for b in (self.copy_button, self.edit_button, self.regen_button, self.continue_button):
            header.addWidget(b)
        self.think_button = QToolButton(self)
        self.think_button.setAutoRaise(True)
        self.think_button.setCheckable(True)
        self.think_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.think_button.toggled.connect(self._toggle_thinking)
        self.think_button.setVisible(False)
        self.think_body = MessageBody(self)
        self.think_body.setObjectName("thinking")
        self.think_body.setVisible(False)
        self.body = MessageBody(self)
        self.renderer = Renderer(self.body.document())
        self.files = SentFiles(turn.attachments, self, turn.images)  # the files and pictures it carried
        self.calls_label = QLabel(self)  # the tool calls a reply made, in words
        self.calls_label.setObjectName("messageMeta")
        self.calls_label.setTextFormat(Qt.TextFormat.PlainText)
        self.calls_label.setWordWrap(True)
        self.calls_label.setVisible(False)
        self.editor = QPlainTextEdit(self)
        self.editor.setVisible(False)
        self.editor.setMinimumHeight(80)
        send = QPushButton("Send")
        send.clicked.connect(self._finish_edit)
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self._cancel_edit)
        self.edit_row = QWidget(self)
        row = QHBoxLayout(self.edit_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addStretch(1)
        row.addWidget(cancel)
        row.addWidget(send)
        self.edit_row.setVisible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(2)
        layout.addLayout(header)
        layout.addWidget(self.think_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.think_body)
        layout.addWidget(self.body)
        layout.addWidget(self.files)
        layout.addWidget(self.calls_label)
        layout.addWidget(self.editor)
        layout.addWidget(self.edit_row)

    def _tool(self, text: str, tip: str, slot: Callable[[], object]) -> QToolButton:
        b = QToolButton(self)
        b.setText(text)
        b.setToolTip(tip)
        b.setAutoRaise(True)
        b.clicked.connect(slot)
        return b

    def refresh(self, highlight_draft: bool) -> None:
        turn = self.turn
        spans = turn.spans if highlight_draft else ()
        thinking, rest, at = split_thinking(turn.text) if turn.role == "assistant" else \
            (None, turn.text, 0)
        if at:
            spans = [(a - at, b - at) for a, b in spans if b > at]
        self.think_button.setVisible(thinking is not None)
        if thinking is not None:
            open_ = turn.streaming and not rest
            self.think_button.setText(("▾ " if self.think_button.isChecked() else "▸ ") +
                                      thinking_label(turn, finished=not open_))
            self.think_body.setPlainText(thinking.strip())
        # a reply made only of tool calls shows its calls, not an empty body
        self.body.setVisible(bool(rest) or (thinking is None and not turn.tool_calls))
        self.body.codes = self.renderer.render(rest or ("…" if turn.streaming else ""),
                                               theme.colors(), spans=spans,
                                               markdown=turn.role != "system",
                                               html=turn.role == "assistant",
                                               plain_prose=turn.role == "user")
        self.meta_label.setText(summary(turn))
        self.continue_button.setVisible(turn.reason == "length" and not turn.streaming)
        self.calls_label.setVisible(bool(turn.tool_calls))
        if turn.tool_calls:
            self.calls_label.setText(calls_text(turn.tool_calls))

    def _toggle_thinking(self, on: bool) -> None:
        self.think_body.setVisible(on)
        text = self.think_button.text()
        self.think_button.setText(("▾ " if on else "▸ ") + text[2:])

    def set_versions(self, shown: int, count: int) -> None:
        """``‹ 2/3 ›``: which version of this message is shown; hidden with only one."""
        self._versions = (shown, count)
        self.version_label.setText(f"{shown}/{count}")
        for w in (self.prev_button, self.version_label, self.next_button):
            w.setVisible(count > 1)
        self.prev_button.setEnabled(shown > 1)
        self.next_button.setEnabled(shown < count)

    def set_busy(self, busy: bool) -> None:
        for b in (self.edit_button, self.regen_button, self.continue_button, self.prev_button,
                  self.next_button):
            b.setEnabled(not busy)
        if not busy:
            shown, count = self._versions
            self.prev_button.setEnabled(shown > 1)
            self.next_button.setEnabled(shown < count)

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.turn.text)

    def _start_edit(self) -> None:
        self.editor.setPlainText(self.turn.text)
        self._editing(True)
        self.editor.setFocus()

    def _finish_edit(self) -> None:
        text = self.editor.toPlainText().strip()
        self._editing(False)
        if text:
            self.edit_submitted.emit(text)

    def _cancel_edit(self) -> None:
        self._editing(False)

    def _editing(self, on: bool) -> None:
        self.editor.setVisible(on)
        self.edit_row.setVisible(on)
        self.body.setVisible(not on)


THINK = re.compile(r"\A\s*<think>(.*?)(?:</think>\s*|\Z)", re.DOTALL)


def split_thinking(text: str) -> tuple[str | None, str, int]:
    """(the reasoning of a ``<think>…</think>`` opening, the rest, where the rest starts).
    A section still open (streaming) is all reasoning; no section: (None, text, 0)."""
    m = THINK.match(text)
    if m is None:
        return None, text, 0
    return m.group(1), text[m.end():], m.end()


def thinking_label(turn: Turn, *, finished: bool) -> str:
    if not finished:
        return "Thinking…"
    if turn.think_s is not None:
        return f"Thought for {turn.think_s:.0f} s" if turn.think_s >= 1 else "Thought briefly"
    return "Reasoning"


def summary(turn: Turn) -> str:
    """"128 tokens · 41.3 tok/s · 72% drafted tokens accepted", plus how it ended if not stop."""
    parts = []
    s = turn.stats
    if turn.streaming:
        parts.append("generating…")
    elif s is not None:
        n = s.n_completion
        if not turn.text.strip() and not turn.tool_calls:
            parts.append("ended without text")
        # a rate needs two tokens at least (the first one's time is the prompt's)
        parts.append(f"{n} tokens · {s.tokens_per_s:.1f} tok/s" if n > 1 else
                     f"{n} token" if n == 1 else "no tokens")
        if s.proposed:
            parts.append(f"{s.acceptance_rate:.0%} of drafts accepted")
        if turn.sources:
            parts.append("saw " + "; ".join(turn.sources))
    if turn.reason in REASONS:
        parts.append(REASONS[turn.reason])
    return " · ".join(parts)
