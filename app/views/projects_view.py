"""The projects above the conversation list: "All conversations" and each project; choosing one
narrows the list and its search to it, conversations dragged onto one move into it, and its
menu makes, renames, deletes a project and sets its system prompt, preset and files
(app.control.projects)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QMimeData, QPoint, Qt
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog, QInputDialog, QListWidget, QListWidgetItem, QMenu, QMessageBox, QWidget

from app.control.projects import ProjectFlow

if TYPE_CHECKING:
    from app.views.main_window import MainWindow

MIME = "application/x-duet-conversations"  # ids of conversations dragged from the list
NAME_ROLE = Qt.ItemDataRole.UserRole
ALL = "All conversations"


def conversation_mime(ids: list[str]) -> QMimeData:
    mime = QMimeData()
    mime.setData(MIME, QByteArray("\n".join(ids).encode()))
    return mime


def dragged_ids(mime: QMimeData) -> list[str]:
    return [i for i in bytes(mime.data(MIME).data()).decode(errors="replace").split("\n") if i]


class ProjectList(QListWidget):
    """The projects of ``flow``: a click shows one, a drop of conversations moves them."""

    def __init__(self, flow: ProjectFlow, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("projectList")
        self.project_flow = flow
        self.setAcceptDrops(True)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._menu)
        self.currentItemChanged.connect(self._on_current)
        flow.changed.connect(self.fill)
        self.fill()

    def fill(self) -> None:
        self.blockSignals(True)
        self.clear()
        for name in (None, *self.project_flow.projects.names):
            item = QListWidgetItem(ALL if name is None else name)
            item.setData(NAME_ROLE, name)
            if name is not None:
                project = self.project_flow.projects.projects[name]
                prompt = project.system_prompt
                item.setToolTip((f"System prompt: {prompt}" if prompt else
                                 "No system prompt of its own") +
                                (f"\nPreset: {project.preset}" if project.preset else "") +
                                "".join(f"\nFile: {a.name}" for a in project.files))
            self.addItem(item)
            if name == self.project_flow.selected:
                self.setCurrentItem(item)
        self.blockSignals(False)
        rows = min(self.count(), 5)  # as tall as its rows, up to five (then it scrolls)
        self.setFixedHeight(rows * max(self.sizeHintForRow(0), 1) + 2 * self.frameWidth() + 2)

    def _on_current(self, item: QListWidgetItem | None, _prev: QListWidgetItem | None) -> None:
        if item is not None:
            self.project_flow.select(item.data(NAME_ROLE))

    # -- drops of conversations ----------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt's name
        if event.mimeData().hasFormat(MIME):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:  # noqa: N802 - Qt's name
        if event.mimeData().hasFormat(MIME) and self.itemAt(event.position().toPoint()) is not None:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt's name
        item = self.itemAt(event.position().toPoint())
        if not event.mimeData().hasFormat(MIME) or item is None:
            event.ignore()
            return
        self.project_flow.move(dragged_ids(event.mimeData()), item.data(NAME_ROLE))
        event.acceptProposedAction()

    # -- the menu ------------------------------------------------------------------------------
    def _menu(self, pos: QPoint) -> None:
        item = self.itemAt(pos)
        name = item.data(NAME_ROLE) if item is not None else None
        menu = QMenu(self)
        menu.addAction("New project…", self.ask_new)
        if name is not None:
            menu.addAction("Rename…", lambda: self.ask_rename(name))
            menu.addAction("System prompt…", lambda: self.ask_prompt(name))
            self._preset_menu(menu.addMenu("Preset"), name)
            self._files_menu(menu.addMenu("Files"), name)
            menu.addAction("Delete", lambda: self.ask_delete(name))
        menu.exec(self.mapToGlobal(pos))

    def _preset_menu(self, menu: QMenu, name: str) -> None:
        """The presets to give project ``name`` (its conversations' sampling, drafter and,
        where the project has none, system prompt), the one it has checked."""
        chosen = self.project_flow.projects.projects[name].preset
        names: list[str | None] = [None, *(p.name for p in self.project_flow.presets())]
        for preset in names:
            action = menu.addAction(preset or "None",
                                    functools.partial(self.project_flow.set_preset, name, preset))
            action.setCheckable(True)
            action.setChecked((preset or "") == chosen)

    def _files_menu(self, menu: QMenu, name: str) -> None:
        """Add files to project ``name`` (every conversation started in it gets them on its
        first message), or remove one."""
        menu.addAction("Add files…", lambda: self.ask_files(name))
        files = self.project_flow.projects.projects[name].files
        if files:
            menu.addSeparator()
        for a in files:
            menu.addAction(f"Remove {a.name}",
                           functools.partial(self.project_flow.remove_file, name, a.sha256))

    def ask_files(self, name: str) -> None:
        chosen, _ = QFileDialog.getOpenFileNames(self, f"{name}: add files")
        if chosen:
            self.project_flow.add_files(name, [Path(f) for f in chosen])

    def ask_new(self) -> None:
        name, ok = QInputDialog.getText(self, "New project", "Name:")
        if ok and name.strip():
            made = self.project_flow.create(name)
            if made is not None:
                self.project_flow.select(made)

    def ask_rename(self, name: str) -> None:
        new, ok = QInputDialog.getText(self, "Rename the project", "Name:", text=name)
        if ok:
            self.project_flow.rename(name, new)

    def ask_prompt(self, name: str) -> None:
        old = self.project_flow.projects.projects[name].system_prompt
        text, ok = QInputDialog.getMultiLineText(
            self, f"{name}: system prompt", "Every conversation started in this project begins "
            "with this system prompt (empty: the one in the settings):", old)
        if ok:
            self.project_flow.set_prompt(name, text)

    def ask_delete(self, name: str) -> None:
        answer = QMessageBox.question(self, "Delete the project", f"Delete the project “{name}”? "
                                      "Its conversations are kept, in no project.")
        if answer == QMessageBox.StandardButton.Yes:
            self.project_flow.remove(name)


def connect(window: MainWindow) -> ProjectFlow:
    """The projects in ``window``: above its list, their prompts and presets for its chats,
    following its files."""
    c = window.controller
    flow = ProjectFlow(c.library, window.notice.show_message, parent=window)
    window.sidebar.follow_projects(flow)
    flow.presets = lambda: window.presets.presets
    c.chat_settings.project_prompt = flow.system_prompt
    c.chat_settings.project_preset = flow.preset
    c.chat_settings.project_files = flow.files
    c.conversation_saved.connect(lambda saved: flow.saved(saved.conversation_id, saved.path))
    c.file_renamed.connect(flow.renamed)
    c.file_deleted.connect(flow.deleted)
    window.importing.finished.connect(lambda _report: flow.reload())  # (it may add projects)
    return flow
