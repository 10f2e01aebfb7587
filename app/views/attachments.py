"""Files attached to the message being written: read off the GUI thread, shown as chips above
the composer (name, size in tokens, pages), opened to show their text, and sent with the
message (engine.chat.messages.Attachment: the text and the file's SHA-256, never the path).

A file is read once (engine.documents.extract) on a worker thread; what comes back is queued to
the GUI thread. A file that cannot be read gets its one-line reason in the window, and nothing
else changes. Each chip's menu sets how the file goes into the prompt: whole, only the passages
the message finds, or automatically (whole when it fits).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from PySide6.QtCore import QObject, QSize, Qt, Signal
from PySide6.QtGui import QIcon, QPixmap
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QMenu, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

from engine.chat.messages import Attachment, Image
from engine.errors import DuetError

log = logging.getLogger(__name__)

MODES = (("auto", "Whole when it fits, else the passages the message finds"),
         ("whole", "Whole"), ("retrieved", "Only the passages the message finds"))


@dataclass(frozen=True)
class Read:
    """A file read: its attachment, and its size in the loaded model's tokens (None: no model)."""

    attachment: Attachment
    n_tokens: int | None


def read_file(path: Path, count: Callable[[str], int] | None) -> Read | Image:
    """Read ``path`` into an attachment, or a picture (PNG, JPEG, WebP, GIF: checked, for the
    model's projector) (on a worker thread; DuetError: one line)."""
    # lazy: the document readers (html, xml, SQLite FTS; ~12 ms) load at the first attached file,
    # not with the window
    from engine.documents.extract import read_document
    from engine.prompts.attachments import attachment
    from engine.vision.images import MAX_BYTES, mime_of

    try:
        head = b""
        if path.is_file():  # (never opened otherwise: a FIFO would block; read_document says why)
            with open(path, "rb") as f:
                head = f.read(16)
        if mime_of(head) is not None:
            if path.stat().st_size > MAX_BYTES:
                raise DuetError(f"{path.name}: the image is over {MAX_BYTES >> 20} MiB")
            return read_picture(path.read_bytes(), path.name)
    except OSError:
        pass  # (read_document says why, in one line)
    doc = read_document(path)
    return Read(attachment(doc), count(doc.text) if count is not None else None)


def read_picture(data: bytes, name: str) -> Image:
    """A picture's bytes, checked (engine.vision.images; DuetError: one line)."""
    from engine.vision.images import load

    load(data)
    return Image(data, name)


def describe(read: Read) -> str:
    """"manual.pdf · 3,012 tokens · 12 pages"."""
    return describe_attachment(read.attachment, read.n_tokens)


def describe_attachment(a: Attachment, n_tokens: int | None = None) -> str:
    """"manual.pdf · 3,012 tokens · 12 pages" (characters where the tokens are not known)."""
    parts = [a.name, f"{n_tokens:,} tokens" if n_tokens is not None else
             f"{len(a.text):,} characters"]
    if a.pages:
        parts.append(f"{len(a.pages)} page{'s' if len(a.pages) != 1 else ''}")
    return " · ".join(parts)


class Attachments(QObject):
    """The files attached to the next message. ``changed`` when the list does; ``failed(line)``
    when a file cannot be read."""

    changed = Signal()
    failed = Signal(str)
    _done = Signal(object, object)  # (path, Read | DuetError), queued to the GUI thread

    def __init__(self, count: Callable[[], Callable[[str], int] | None],
                 parent: QObject | None = None) -> None:
        """``count``: the loaded model's token counter, when there is one."""
        super().__init__(parent)
        self.count = count
        self.items: list[Read] = []
        self.pictures: list[Image] = []  # pictures for the model's projector
        self.pending = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="duet-attach")
        self._done.connect(self._take)

    def add(self, path: Path) -> None:
        self.pending += 1
        future = self._pool.submit(read_file, path, self.count())
        future.add_done_callback(partial(self._finished, path))

    def add_picture(self, data: bytes, name: str = "pasted.png") -> None:
        """A picture pasted (its bytes), checked off the GUI thread."""
        self.pending += 1
        future = self._pool.submit(read_picture, data, name)
        future.add_done_callback(partial(self._finished, Path(name)))

    def current_pictures(self) -> tuple[Image, ...]:
        return tuple(self.pictures)

    def take_pictures(self) -> tuple[Image, ...]:
        """The pictures for the message being sent; the list is empty afterwards."""
        out = tuple(self.pictures)
        if out:
            self.pictures.clear()
            self.changed.emit()
        return out

    def remove_picture(self, index: int) -> None:
        if 0 <= index < len(self.pictures):
            del self.pictures[index]
            self.changed.emit()

    def _finished(self, path: Path, future: Future) -> None:
        self._done.emit(path, _result(future))  # (on the reading thread: queued to the GUI's)

    def current(self) -> tuple[Attachment, ...]:
        """The attachments for the message being written (they stay)."""
        return tuple(r.attachment for r in self.items)

    def take_all(self) -> tuple[Attachment, ...]:
        """The attachments for the message being sent; the list is empty afterwards."""
        out = tuple(r.attachment for r in self.items)
        if out:
            self.items.clear()
            self.changed.emit()
        return out

    def remove(self, index: int) -> None:
        if 0 <= index < len(self.items):
            del self.items[index]
            self.changed.emit()

    def set_mode(self, index: int, mode: str) -> None:
        r = self.items[index]
        self.items[index] = replace(r, attachment=replace(r.attachment, mode=mode))
        self.changed.emit()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _take(self, path: Path, result: object) -> None:
        self.pending -= 1
        if isinstance(result, Read):
            self.items.append(result)
            self.changed.emit()
        elif isinstance(result, Image):
            self.pictures.append(result)
            self.changed.emit()
        else:
            self.failed.emit(str(result))


def _result(future: Future) -> object:
    error = future.exception()
    if error is None:
        return future.result()
    if isinstance(error, DuetError):
        return error
    log.error("reading an attached file failed", exc_info=error)
    return DuetError(f"the file could not be read: {type(error).__name__}")


class ChipBar(QWidget):
    """The attached files as chips: click one to see its text; its menu sets its mode or
    removes it."""

    def __init__(self, attachments: Attachments, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attachments = attachments
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(12, 4, 12, 0)
        self.row.addStretch(1)
        self.chips: list[QToolButton] = []
        attachments.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        for chip in self.chips:
            self.row.removeWidget(chip)
            chip.deleteLater()
        self.chips = []
        for i, read in enumerate(self.attachments.items):
            chip = QToolButton(self)
            chip.setObjectName("attachment-chip")
            mode = read.attachment.mode
            chip.setText(describe(read) + ("" if mode == "auto" else f" · {mode}"))
            chip.setToolTip("Click to read the text Duet took from the file")
            chip.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
            menu = QMenu(chip)
            for key, label in MODES:
                action = menu.addAction(label)
                action.setCheckable(True)
                action.setChecked(key == mode)
                action.triggered.connect(partial(self._mode, i, key))
            menu.addSeparator()
            menu.addAction("Remove", partial(self.attachments.remove, i))
            chip.setMenu(menu)
            chip.clicked.connect(partial(show_text, self, read))
            self.row.insertWidget(i, chip)
            self.chips.append(chip)
        for j, image in enumerate(self.attachments.pictures):
            chip = picture_chip(self, image)
            menu = QMenu(chip)
            menu.addAction("Remove", partial(self.attachments.remove_picture, j))
            chip.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
            chip.setMenu(menu)
            self.row.insertWidget(len(self.chips), chip)
            self.chips.append(chip)
        self.setVisible(bool(self.chips))

    def _mode(self, index: int, mode: str, _checked: bool = False) -> None:
        self.attachments.set_mode(index, mode)


class SentFiles(QWidget):
    """The files a sent message carried, as chips (name, size, pages; the mode when one was
    chosen): click one to read the text Duet took from it, as kept in the conversation (a
    message keeps the text, never the path)."""

    def __init__(self, files: tuple[Attachment, ...], parent: QWidget | None = None,
                 pictures: tuple[Image, ...] = ()) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 2, 0, 2)
        self.chips: list[QToolButton] = [picture_chip(self, image) for image in pictures]
        for chip in self.chips:
            row.addWidget(chip)
        for a in files:
            chip = QToolButton(self)
            chip.setObjectName("attachment-chip")
            chip.setText(describe_attachment(a) + ("" if a.mode == "auto" else f" · {a.mode}"))
            chip.setToolTip("Click to read the text Duet took from the file when it was sent")
            chip.clicked.connect(partial(show_attachment, self, a))
            row.addWidget(chip)
            self.chips.append(chip)
        row.addStretch(1)
        self.setVisible(bool(self.chips))


def show_text(parent: QWidget, read: Read, _checked: bool = False) -> QDialog:
    """A window with the text taken from the file (what the model will see of it)."""
    return show_attachment(parent, read.attachment, title=describe(read))


def show_attachment(parent: QWidget, a: Attachment, _checked: bool = False, *,
                    title: str | None = None) -> QDialog:
    """A window with an attachment's text, as the model saw it."""
    dialog = QDialog(parent)
    dialog.setObjectName("attachment-text")
    dialog.setWindowTitle(title or describe_attachment(a))
    view = QPlainTextEdit(dialog)
    view.setReadOnly(True)
    view.setPlainText(a.text)
    layout = QVBoxLayout(dialog)
    layout.addWidget(view)
    dialog.resize(640, 480)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
    return dialog


THUMB = 64  # pixels: a picture's chip


def picture_chip(parent: QWidget, image: Image) -> QToolButton:
    """A picture as a chip: its thumbnail and name; a click shows it large."""
    chip = QToolButton(parent)
    chip.setObjectName("picture-chip")
    pixmap = QPixmap()
    pixmap.loadFromData(image.data)
    chip.setIcon(QIcon(pixmap.scaled(THUMB, THUMB, Qt.AspectRatioMode.KeepAspectRatio,
                                     Qt.TransformationMode.SmoothTransformation)))
    chip.setIconSize(QSize(THUMB, THUMB))
    chip.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextUnderIcon)
    chip.setText(image.name)
    chip.setToolTip(f"{image.name}: click to see it large")
    chip.clicked.connect(partial(show_picture, parent, image))
    return chip


def show_picture(parent: QWidget, image: Image, _checked: bool = False) -> QDialog:
    """A window with the picture at up to the screen's size."""
    dialog = QDialog(parent)
    dialog.setObjectName("picture-view")
    dialog.setWindowTitle(image.name)
    label = QLabel(dialog)
    pixmap = QPixmap()
    pixmap.loadFromData(image.data)
    label.setPixmap(pixmap.scaled(1024, 768, Qt.AspectRatioMode.KeepAspectRatio,
                                  Qt.TransformationMode.SmoothTransformation)
                    if pixmap.width() > 1024 or pixmap.height() > 768 else pixmap)
    layout = QVBoxLayout(dialog)
    layout.addWidget(label)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
    return dialog
