"""A dismissable one-line notice above the chat: errors, fallbacks, "reload to apply". It shows
what AppState holds (app.control.state.Notice): the notice of the conversation shown or the
app's, an error first, else the later said (AppState.notice_for)."""

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
        self.state: AppState | None = None
        self.scope: str | None = None  # of the notice shown
        close.clicked.connect(self._dismiss)
        self.hide()

    def follow(self, library: Library) -> None:
        """Show the notice of the conversation shown (or the app's): another's is hidden."""

        def on_change(kind: str, _conv: Conversation | None) -> None:
            if kind == "current":
                self.refresh()
        library.subscribe(on_change)

    def observe(self, state: AppState) -> None:
        """Show the notices AppState holds (app.control.state.Notice)."""
        self.state = state
        state.subscribe(lambda what: self.refresh() if what == "notice" else None)

    def refresh(self) -> None:
        state = self.state
        if state is None:
            return
        current = state.library.current
        notice = state.notice_for(current.id if current is not None else None)
        if notice is None:
            self.hide()
            return
        self.kind, self.scope = notice.kind, notice.scope
        self.setStyleSheet(self.STYLES.get(notice.kind, self.STYLES["info"]))
        self.label.setText(notice.text)
        self.action.setVisible(notice.action is not None)
        self.action.setText(notice.action or "")
        self._callback = notice.callback
        self.show()

    def show_message(self, text: str, kind: str = "info") -> None:
        """A notice about no conversation in particular, into AppState (a slot: other threads'
        signals arrive queued)."""
        if self.state is not None:
            self.state.tell(text, kind)

    def show_error(self, text: str) -> None:
        self.show_message(text, "error")

    def text(self) -> str:
        return "" if self.isHidden() else self.label.text()

    def _dismiss(self) -> None:
        """Dismissed for good: not shown again with its conversation."""
        if self.state is not None:
            self.state.unsay(self.scope)
        self.hide()

    def _run_action(self) -> None:
        callback = self._callback
        self._dismiss()
        if callback is not None:
            callback()
