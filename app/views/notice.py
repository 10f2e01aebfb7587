"""A dismissable one-line notice above the chat: errors, fallbacks, "reload to apply"."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from app.control.state import AppState
from engine.conversation.library import Library
from engine.conversation.tree import Conversation


class NoticeBar(QFrame):
    STYLES = {
        "error": "QFrame#notice { background: rgba(207, 34, 46, 40); border-radius: 6px; }",
        "info": "QFrame#notice { background: rgba(9, 105, 218, 32); border-radius: 6px; }",
    }

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("notice")
        self.kind = "info"
        self.until_load = False  # a model's load resolves it (a failed load, a pending reload)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.action = QPushButton(self)
        self.action.setVisible(False)
        self.action.clicked.connect(self._run_action)
        close = QToolButton(self)
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.action)
        layout.addWidget(close)
        self._callback: Callable[[], None] | None = None
        self.owner: Conversation | None = None  # the conversation the notice is about
        self.from_state = False  # the notice shown is the app's (AppState.notice)
        close.clicked.connect(self._dismiss)
        self.hide()

    def follow(self, library: Library) -> None:
        """Show the notice of the conversation shown; a notice of another one is hidden."""
        def on_change(kind: str, conv: Conversation | None) -> None:
            if kind not in ("current", "status"):
                return
            notice = conv.status.notice if conv is not None else None
            if notice is not None:
                self.show_message(*notice)
                self.owner = conv
            elif self.owner is not None or kind == "current":
                self.hide()
        library.subscribe(on_change)

    def observe(self, state: AppState) -> None:
        """Show the app's notice (about models and settings); one a load resolves goes with it."""
        def on_change(what: str) -> None:
            if what == "model" and (self.kind == "info" or self.until_load):
                self.hide()  # a load ended: what it resolved goes
            elif what == "notice" and state.notice is not None:
                n = state.notice
                self.show_message(n.text, n.kind, n.action, n.callback, until_load=n.until_load)
                self.from_state = True
            elif what == "notice" and self.from_state:
                self.hide()
        state.subscribe(on_change)

    def show_message(self, text: str, kind: str = "info", action: str | None = None,
                     callback: Callable[[], None] | None = None, *, until_load: bool = False) -> None:
        self.kind, self.until_load = kind, until_load
        self.setStyleSheet(self.STYLES.get(kind, self.STYLES["info"]))
        self.label.setText(text)
        self.action.setVisible(action is not None)
        self.action.setText(action or "")
        self._callback = callback
        self.owner = None
        self.from_state = False
        self.show()

    def show_error(self, text: str) -> None:
        """An error that belongs to no conversation (a slot for signals of other threads)."""
        self.show_message(text, "error")

    def text(self) -> str:
        return "" if self.isHidden() else self.label.text()

    def _dismiss(self) -> None:
        if self.owner is not None:  # dismissed for good, not shown again with its conversation
            self.owner.status.notice = None
        self.hide()

    def _run_action(self) -> None:
        callback = self._callback
        self._dismiss()
        if callback is not None:
            callback()
