"""The chat view: one widget per message in a scroll area; only the streaming one re-renders.

Each message shows its role, a one-line summary of how the reply went, and its actions: Copy
(the raw text), Edit (user messages: edit and resend) and Regenerate (replies). Code blocks
carry their own Copy link. The view follows the end of the conversation unless the user
scrolled up.
"""

from __future__ import annotations

import math
import re
import time
from typing import Callable

from PySide6.QtCore import QSize, QSizeF, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QWheelEvent
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
                               QScrollArea, QSizePolicy, QTextBrowser, QToolButton, QVBoxLayout,
                               QWidget)

from engine.conversation.library import Library

from app import theme
from app.conversation import Conversation, Turn
from app.render import COPY_SCHEME, Renderer

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
        self.body.setVisible(bool(rest) or thinking is None)
        self.body.codes = self.renderer.render(rest or ("…" if turn.streaming else ""),
                                               theme.colors(), spans=spans,
                                               markdown=turn.role != "system",
                                               html=turn.role == "assistant")
        self.meta_label.setText(summary(turn))
        self.continue_button.setVisible(turn.reason == "length" and not turn.streaming)

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
        parts.append(f"{s.n_tokens} tokens · {s.tokens_per_s:.1f} tok/s")
        if s.proposed:
            parts.append(f"{s.acceptance_rate:.0%} of drafts accepted")
    if turn.reason in REASONS:
        parts.append(REASONS[turn.reason])
    return " · ".join(parts)


class ChatView(QScrollArea):
    """Shows one conversation. ``regenerate_requested(i)`` / ``edit_requested(i, text)`` /
    ``switch_requested(i, step)`` / ``continue_requested()``. ``follow(library)`` makes it show
    the library's current conversation and follow its changes."""

    regenerate_requested = Signal(int)
    edit_requested = Signal(int, str)
    switch_requested = Signal(int, int)
    continue_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._inner = QWidget()
        self._inner.setObjectName("chatInner")
        self._layout = QVBoxLayout(self._inner)
        self._layout.setContentsMargins(16, 12, 16, 12)
        self._layout.setSpacing(10)
        self._layout.addStretch(1)
        self.setWidget(self._inner)
        self.placeholder = QLabel("Send a message to start.", self._inner)
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setObjectName("placeholder")
        self._layout.insertWidget(0, self.placeholder)
        self.widgets: list[MessageWidget] = []
        self.conversation: Conversation | None = None
        self.highlight_draft = True
        self._busy = False
        self._follow = True
        self._refresh_timer = QTimer(self)
        self._refresh_timer.setSingleShot(True)
        self._refresh_timer.timeout.connect(self._refresh)
        self._refresh_cost = 0.0
        self._last_refresh = float("-inf")
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range)
        self.restyle()

    # -- following the model ---------------------------------------------------------------
    def follow(self, library: Library) -> None:
        library.subscribe(self._on_model)

    def _on_model(self, kind: str, conv: Conversation | None) -> None:
        if kind == "current" or (kind == "path" and conv is not self.conversation):
            if conv is not None and not conv.loaded:
                self.set_placeholder_text(f"Opening {conv.path.name if conv.path else conv.title}…")
                self.set_conversation(None)
            else:
                self.set_placeholder_text("Send a message to start.")
                self.set_conversation(conv)
        elif kind == "path":
            self.sync()
        elif kind == "text" and conv is self.conversation:
            self.refresh_last(now=conv is not None and conv.streaming is None)

    # -- content ---------------------------------------------------------------------------
    def set_conversation(self, conversation: Conversation | None) -> None:
        for w in self.widgets:
            w.setParent(None)
            w.deleteLater()
        self.widgets = []
        self.conversation = conversation
        for turn in conversation.turns if conversation else ():
            self._add(turn)
        self._update_versions()
        self._follow = True
        self._update_placeholder()

    def sync(self) -> None:
        """Match the widgets to the conversation's turns (after an append or a truncate)."""
        turns = self.conversation.turns if self.conversation else []
        keep = 0
        while keep < min(len(turns), len(self.widgets)) and self.widgets[keep].turn is turns[keep]:
            keep += 1
        for w in self.widgets[keep:]:
            w.setParent(None)
            w.deleteLater()
        del self.widgets[keep:]
        for turn in turns[keep:]:
            self._add(turn)
        self._update_versions()
        self._update_placeholder()

    def refresh_last(self, *, now: bool = False) -> None:
        """Re-render the last message only (the one streaming).

        Updates come at most ~30 times a second from the worker; a long reply can still take
        several milliseconds to lay out, so the next update waits at least twice as long as
        the last one took (the GUI thread stays free at least half of the time). ``now``:
        render at once (the reply finished)."""
        if now:
            self._refresh_timer.stop()
            self._refresh()
            return
        if self._refresh_timer.isActive():
            return
        wait = self._last_refresh + max(MIN_REFRESH_S, 2 * self._refresh_cost) - time.monotonic()
        if wait <= 0:
            self._refresh()
        else:
            self._refresh_timer.start(max(1, int(wait * 1000)))

    def _refresh(self) -> None:
        if not self.widgets:
            return
        t = time.monotonic()
        widget = self.widgets[-1]
        widget.refresh(self.highlight_draft)
        widget.body.document().documentLayout().documentSize()  # lay it out now, and time it
        self._last_refresh = time.monotonic()
        self._refresh_cost = self._last_refresh - t

    def refresh_all(self) -> None:
        for w in self.widgets:
            w.refresh(self.highlight_draft)

    def set_highlight_draft(self, on: bool) -> None:
        if on != self.highlight_draft:
            self.highlight_draft = on
            self.refresh_all()

    def set_busy(self, busy: bool) -> None:
        self._busy = busy
        for w in self.widgets:
            w.set_busy(busy)

    def set_placeholder_text(self, text: str) -> None:
        self.placeholder.setText(text)

    def restyle(self) -> None:
        """Re-derive the message frames' colours from the current palette (after a theme change)."""
        self.setStyleSheet(
            "QWidget#chatInner { background: palette(base); }"
            "MessageBody { background: transparent; }"
            "QFrame#userMessage { background: palette(alternate-base); border-radius: 10px; }"
            "QFrame#systemMessage { border: 1px dashed palette(mid); border-radius: 10px; }"
            "QLabel#messageMeta, QLabel#placeholder, MessageBody#thinking "
            "{ color: palette(placeholder-text); }")
        self.refresh_all()

    # -- internals -------------------------------------------------------------------------
    def _add(self, turn: Turn) -> None:
        w = MessageWidget(turn, self._inner)
        w.refresh(self.highlight_draft)
        w.set_busy(self._busy)
        w.regenerate.connect(lambda w=w: self._emit_for(w, None))
        w.edit_submitted.connect(lambda text, w=w: self._emit_for(w, text))
        w.switch.connect(lambda step, w=w: self._switch_for(w, step))
        w.continue_.connect(self.continue_requested)
        self._layout.insertWidget(self._layout.count() - 1, w)
        self.widgets.append(w)

    def _emit_for(self, widget: MessageWidget, text: str | None) -> None:
        if widget not in self.widgets:
            return
        index = self.widgets.index(widget)
        if text is None:
            self.regenerate_requested.emit(index)
        else:
            self.edit_requested.emit(index, text)

    def _switch_for(self, widget: MessageWidget, step: int) -> None:
        if widget in self.widgets:
            self.switch_requested.emit(self.widgets.index(widget), step)

    def _update_versions(self) -> None:
        conv = self.conversation
        if conv is None:
            return
        for i, w in enumerate(self.widgets):
            w.set_versions(*conv.versions(i))
            w.set_busy(self._busy)

    def _update_placeholder(self) -> None:
        self.placeholder.setVisible(not self.widgets)

    def _on_scrolled(self, value: int) -> None:
        self._follow = value >= self.verticalScrollBar().maximum() - 8

    def _on_range(self, _lo: int, hi: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(hi)
