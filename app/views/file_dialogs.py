"""The window's file dialogs for conversations: open, save as, import, export, rename, delete,
and the recent files menu. Each asks the person, then hands the answer to ``window.controller.files``."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox, QWidget

from app.control.controller import ChatController
from app.control.conversation import SUFFIX, RecentFiles
from engine import paths
from engine.conversation.export import export


class Window(Protocol):
    """What the dialogs use of the window (app.views.main_window.MainWindow, which imports this)."""

    controller: ChatController
    recent: RecentFiles
    recent_menu: Any  # QMenu
    notice: Any  # app.views.notice.NoticeBar
    status: Any  # app.views.status.StatusBar
    importing: Any  # app.control.importing.Importing

    def window(self) -> QWidget: ...

CONVERSATION_FILTER = f"Duet conversations (*{SUFFIX});;All files (*)"


def open_conversation(window: Window) -> None:
    name, _ = QFileDialog.getOpenFileName(window.window(), "Open a conversation",
                                          str(paths.conversations_dir()), CONVERSATION_FILTER)
    if name:
        window.controller.files.open_path(Path(name))


def save_as(window: Window) -> None:
    conv = window.controller.current
    if conv is None or not conv.turns:
        return
    start = conv.path or paths.conversations_dir() / (conv.title + SUFFIX)
    name, _ = QFileDialog.getSaveFileName(window.window(), "Save the conversation", str(start),
                                          CONVERSATION_FILTER)
    if name:
        path = Path(name)
        window.controller.files.save(conv, path if path.suffix == SUFFIX else path.with_suffix(SUFFIX))


def export_shown(window: Window) -> None:
    conv = window.controller.current
    if conv is None or not conv.turns:
        return
    start = Path.home() / (conv.title + ".md")
    name, chosen = QFileDialog.getSaveFileName(
        window.window(), "Export the conversation", str(start),
        "Markdown, the branch shown (*.md);;JSON, every version (*.json)")
    if name:
        path = Path(name)
        if not path.suffix:
            path = path.with_suffix(".json" if "json" in chosen.lower() else ".md")
        try:
            export(conv, path)
        except OSError as e:
            window.notice.show_message(f"Cannot export to {path.name}: {e.strerror}", "error")
            return
        window.status.showMessage(f"Exported {path.name}", 4000)


IMPORT_FILTER = ("Exports: ChatGPT, Claude, Open WebUI, LM Studio, llama.cpp, Duet "
                 "(*.json *.zip *.md);;All files (*)")


def import_exports(window: Window) -> None:
    names, _ = QFileDialog.getOpenFileNames(window.window(), "Import conversations",
                                            str(Path.home()), IMPORT_FILTER)
    if names:
        window.importing.start([Path(n) for n in names])


def rename(window: Window, cid: str | None) -> None:
    conv = window.controller.by_id(cid)
    if conv is None:
        return
    title, ok = QInputDialog.getText(window.window(), "Rename", "Title:", text=conv.title)
    if ok:
        window.controller.files.rename(conv.id, title)


def delete(window: Window) -> None:
    conv = window.controller.current
    if conv is None:
        return
    answer = QMessageBox.question(window.window(), "Delete", f"Delete “{conv.title}”?")
    if answer == QMessageBox.StandardButton.Yes:
        window.controller.files.delete(conv.id)


def fill_recent(window: Window) -> None:
    window.recent_menu.clear()
    for path in window.recent.items:
        window.recent_menu.addAction(str(path), partial(window.controller.files.open_path, path))
    if not window.recent.items:
        window.recent_menu.addAction("(none)").setEnabled(False)
