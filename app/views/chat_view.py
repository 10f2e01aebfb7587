"""The chat view: one widget per message in a scroll area; only the streaming one re-renders.

The messages are ``app.views.message_widget.MessageWidget``s, tool results
``app.views.tool_turns.ToolTurnWidget``s. The view follows the end of the conversation unless the user
scrolled up.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.control.conversation import Conversation, Turn
from app.views.message_widget import MIN_REFRESH_S, MessageWidget
from app.views.tool_turns import ToolTurnWidget
from engine.conversation.library import Library


class ChatView(QScrollArea):
    """Shows one conversation. ``regenerate_requested(i)`` / ``edit_requested(i, text)`` /
    ``switch_requested(i, step)`` / ``continue_requested()`` / ``tool_answered(answer)``.
    ``follow(library)`` makes it show the library's current conversation and follow its changes."""

    regenerate_requested = Signal(int)
    edit_requested = Signal(int, str)
    switch_requested = Signal(int, int)
    continue_requested = Signal()
    tool_answered = Signal(str)  # "once", "always" or "deny": the person's answer to a call

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
        w: MessageWidget
        if turn.role == "tool":
            conv = self.conversation
            call = conv.call_of(len(self.widgets)) if conv is not None else None
            w = tool = ToolTurnWidget(turn, call, self._inner)
            tool.answered.connect(self.tool_answered)
        else:
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
