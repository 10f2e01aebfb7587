"""The composer: Enter sends, Shift+Enter starts a new line, Esc (or the Stop button) cancels."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMimeData, Qt, Signal
from PySide6.QtGui import QImage, QKeyEvent, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QPlainTextEdit, QPushButton, QToolButton, QWidget

if TYPE_CHECKING:
    from app.engine_link.messages import LoadedModel


def local_files(mime: QMimeData) -> list[Path]:
    """The local files a paste or a drop carries (none: it is text)."""
    return [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile()] if mime.hasUrls() else []


def png_bytes(image: QImage) -> bytes:
    """A pasted image as PNG bytes (what the message keeps)."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")  # type: ignore[call-overload]  # (PySide6 takes a str)
    buffer.close()
    return bytes(data.data())


class ComposerEdit(QPlainTextEdit):
    submit = Signal()
    cancel = Signal()
    files_given = Signal(list)  # list[Path]: files pasted or dropped here are attached
    picture_given = Signal(bytes)  # a picture pasted (Ctrl+V of an image): its PNG bytes

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 - Qt's name
        return bool(local_files(source)) or source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 - Qt's name
        files = local_files(source)
        if files:
            self.files_given.emit(files)
        elif source.hasImage():
            self.picture_given.emit(png_bytes(QImage(source.imageData())))
        else:
            super().insertFromMimeData(source)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key, mods = event.key(), event.modifiers()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and \
                not mods & Qt.KeyboardModifier.ShiftModifier:
            self.submit.emit()
            return
        if key == Qt.Key.Key_Escape:
            self.cancel.emit()
            return
        super().keyPressEvent(event)


class Composer(QWidget):
    """``send_requested(text)`` on Enter or Send; ``stop_requested`` on Esc or Stop;
    ``attach_requested`` on the attach button; ``files_given(paths)`` for files pasted;
    ``thinking_toggled(on)`` on the Think switch (shown for a reasoning model)."""

    send_requested = Signal(str)
    stop_requested = Signal()
    attach_requested = Signal()
    thinking_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.edit = ComposerEdit(self)
        self.edit.setPlaceholderText("Message Duet (Enter sends, Shift+Enter for a new line)")
        self.edit.setTabChangesFocus(True)
        self.edit.setFixedHeight(76)
        self.button = QPushButton("Send", self)
        self.button.setMinimumWidth(84)
        self.button.setDefault(True)
        self.attach = QToolButton(self)
        self.attach.setObjectName("attach")
        self.attach.setText("Attach…")
        self.attach.setToolTip("Attach a file: text, code, PDF, .docx or HTML, or a picture for a "
                               "model with a vision projector (or drop or paste it)")
        self.attach.clicked.connect(self.attach_requested)
        self.files_given = self.edit.files_given
        self.picture_given = self.edit.picture_given
        self.think = QToolButton(self)
        self.think.setObjectName("think")
        self.think.setText("Think")
        self.think.setCheckable(True)
        self.think.setToolTip("This conversation's replies think before they answer (a reasoning "
                              "model); off: they answer at once")
        self.think.setVisible(False)
        self.think.clicked.connect(self.thinking_toggled)  # (the person's clicks, not setChecked)
        layout = self._layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 6, 12, 10)
        layout.addWidget(self.attach, 0, Qt.AlignmentFlag.AlignBottom)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.think, 0, Qt.AlignmentFlag.AlignBottom)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignBottom)
        self.edit.submit.connect(self._submit)
        self.edit.cancel.connect(self._cancel)
        self.button.clicked.connect(self._clicked)
        self.generating = False

    def add_tool(self, widget: QWidget) -> None:
        """A tool beside Attach (the microphone)."""
        self._layout.insertWidget(1, widget, 0, Qt.AlignmentFlag.AlignBottom)

    def show_thinking(self, on: bool | None) -> None:
        """The Think switch: hidden (None: the model does not think), else checked or not."""
        self.think.setVisible(on is not None)
        self.think.setChecked(bool(on))

    def show_sight(self, loaded: LoadedModel | None) -> None:
        """The attach button's tooltip: whether the ``loaded`` model reads pictures, and with
        which projector."""
        projector, model = (loaded.projector, loaded.target_name) if loaded else (None, None)
        files = "Attach a file: text, code, PDF, .docx or HTML (or drop or paste it)"
        if projector is not None:
            self.attach.setToolTip(f"{files}, or a picture: {model} reads pictures through {projector}")
        elif model is not None:
            self.attach.setToolTip(f"{files}. {model} cannot read pictures: it needs its vision "
                                   "projector (mmproj-*.gguf) beside the model file")
        else:
            self.attach.setToolTip(files)

    def set_generating(self, on: bool) -> None:
        self.generating = on
        self.button.setText("Stop" if on else "Send")
        self.button.setToolTip("Stop the reply (Esc)" if on else "Send (Enter)")

    def give_back(self, text: str) -> None:
        """Put ``text`` (a message that could not be sent) back, before anything typed since."""
        typed = self.edit.toPlainText()
        self.edit.setPlainText(text + ("\n\n" + typed if typed.strip() else ""))
        self.edit.moveCursor(QTextCursor.MoveOperation.End)

    def _clicked(self) -> None:
        if self.generating:
            self.stop_requested.emit()
        else:
            self._submit()

    def _submit(self) -> None:
        if self.generating:
            return
        text = self.edit.toPlainText().strip()
        if text:
            self.edit.clear()
            self.send_requested.emit(text)

    def _cancel(self) -> None:
        if self.generating:
            self.stop_requested.emit()
