"""A dismissable one-line notice above the chat: errors, fallbacks, "reload to apply"."""

from __future__ import annotations

from typing import Callable

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget


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
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.action)
        layout.addWidget(close)
        self._callback: Callable[[], None] | None = None
        self.hide()

    def show_message(self, text: str, kind: str = "info", action: str | None = None,
                     callback: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self.setStyleSheet(self.STYLES.get(kind, self.STYLES["info"]))
        self.label.setText(text)
        self.action.setVisible(action is not None)
        self.action.setText(action or "")
        self._callback = callback
        self.show()

    def text(self) -> str:
        return "" if self.isHidden() else self.label.text()

    def _run_action(self) -> None:
        callback = self._callback
        self.hide()
        if callback is not None:
            callback()
