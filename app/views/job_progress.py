"""A long job's progress in the status bar (an import, an export of everything): a bar, its
line and Cancel; hidden when nothing runs."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QToolButton, QWidget

STEPS = 1000


class JobProgress(QWidget):
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("jobProgress")
        self.label = QLabel(self)
        self.bar = QProgressBar(self)
        self.bar.setRange(0, STEPS)
        self.bar.setMaximumWidth(160)
        self.bar.setTextVisible(False)
        self.cancel = QToolButton(self)
        self.cancel.setText("Cancel")
        self.cancel.clicked.connect(self.cancel_requested)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 6, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.bar)
        layout.addWidget(self.cancel)
        self.hide()

    def show_progress(self, share: float, line: str) -> None:
        self.bar.setValue(round(max(0.0, min(share, 1.0)) * STEPS))
        self.label.setText(line)
        self.setToolTip(line)
        self.show()

    def end(self, *_: object) -> None:
        self.hide()
        self.bar.setValue(0)
