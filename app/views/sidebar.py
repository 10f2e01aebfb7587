"""The conversation list: new, open, rename, delete (the window does the work), search, the
projects that narrow both (app.views.projects_view), and exports dropped on it to import.

The search matches the conversations open in the app in memory, and the saved ones not opened
yet through the search index, off the GUI thread (app.control.search): their rows change when its
answer comes, and meanwhile keep the last answer for the same query.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QMimeData, QPoint, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.control.conversation import SUFFIX, Conversation
from app.control.drops import MODEL_SUFFIX
from app.control.projects import ProjectFlow
from app.control.search import ConversationSearch
from app.views.projects_view import MIME, ProjectList, conversation_mime
from engine.conversation.export import matches
from engine.conversation.library import Library

ID_ROLE = Qt.ItemDataRole.UserRole


class ConversationList(QListWidget):
    """The rows drag out as the ids of their conversations (onto a project)."""

    def mimeTypes(self) -> list[str]:  # noqa: N802 - Qt's name
        return [MIME]

    def mimeData(self, items: Sequence[QListWidgetItem]) -> QMimeData:  # noqa: N802 - Qt's name
        return conversation_mime([item.data(ID_ROLE) for item in items])


class Sidebar(QWidget):
    selected = Signal(str)
    new_requested = Signal()
    open_requested = Signal()
    rename_requested = Signal(str)
    delete_requested = Signal(str)
    import_requested = Signal(list)  # list[Path]: files dropped here are imported
    files_dropped = Signal(list)  # list[Path]: conversations and models dropped here (opened)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.list = ConversationList(self)
        self.list.setObjectName("conversationList")
        self.list.setSelectionMode(QListWidget.SelectionMode.ExtendedSelection)
        self.list.setDragEnabled(True)
        self.list.setDragDropMode(QListWidget.DragDropMode.DragOnly)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setUniformItemSizes(True)
        self.setAcceptDrops(True)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.currentItemChanged.connect(self._on_current)
        self.list.itemDoubleClicked.connect(lambda item: self.rename_requested.emit(item.data(ID_ROLE)))
        new = QPushButton("New", self)
        new.setToolTip("New conversation (Ctrl+N)")
        new.clicked.connect(self.new_requested)
        open_ = QPushButton("Open…", self)
        open_.setToolTip("Open a .duet conversation file (Ctrl+O)")
        open_.clicked.connect(self.open_requested)
        self.search = QLineEdit(self)
        self.search.setPlaceholderText("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._filter)
        self.searcher = ConversationSearch(parent=self)
        self.searcher.found.connect(self._show_found)
        self._found: tuple[str, frozenset[Path]] = ("", frozenset())  # the last answer
        self._library: Library | None = None
        self._listed: list[tuple[str, str, str]] = []  # (id, label, tooltip) of each row
        self.projects: ProjectList | None = None
        self._flow: ProjectFlow | None = None
        buttons = QHBoxLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        buttons.addWidget(new)
        buttons.addWidget(open_)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        layout.addLayout(buttons)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        self._layout = layout

    def follow_projects(self, flow: ProjectFlow) -> None:
        """Show the projects above the search; the list and its search show the chosen one's."""
        self._flow = flow
        self.projects = ProjectList(flow, self)
        self._layout.insertWidget(1, self.projects)
        flow.changed.connect(lambda: self._filter(self.search.text()))

    def follow(self, library: Library) -> None:
        """List the library's conversations (never a blank one) and mark the one shown."""
        self._library = library

        def on_change(kind: str, _conv: Conversation | None) -> None:
            if kind in ("list", "current"):
                current = library.current
                self.set_conversations(library.listed(), current.id if current else None)
        library.subscribe(on_change)

    def set_conversations(self, conversations: Sequence[Conversation], current: str | None) -> None:
        """List ``conversations``, ``current`` marked. The same conversations in the same
        order (another one shown, a title changed) change only the rows that differ: with
        10,000 conversations a rebuild holds the window for a quarter of a second."""
        rows = [(c.id, self._label(c), str(c.path) if c.path else "Not saved yet")
                for c in conversations]
        self.list.setUpdatesEnabled(False)
        self.list.blockSignals(True)
        ids = [r[0] for r in rows]
        if ids == [r[0] for r in self._listed]:
            for i, (row, was) in enumerate(zip(rows, self._listed)):
                if row != was:
                    item = self.list.item(i)
                    item.setText(row[1])
                    item.setToolTip(row[2])
            self.list.clearSelection()
            self.list.setCurrentRow(ids.index(current) if current in ids else -1)
        else:
            self.list.clear()  # no current item after it
            for cid, label, tip in rows:
                item = QListWidgetItem(label)
                item.setData(ID_ROLE, cid)
                item.setToolTip(tip)
                self.list.addItem(item)
                if cid == current:
                    self.list.setCurrentItem(item)
        self._listed = rows
        self.list.blockSignals(False)
        self.list.setUpdatesEnabled(True)
        if self.search.text().strip() or self._flow is not None and self._flow.selected is not None:
            self._filter(self.search.text())

    def _shown(self, conv: Conversation) -> bool:
        """In the project chosen (or none is)."""
        return self._flow is None or self._flow.shows(conv)

    def _filter(self, query: str) -> None:
        """Hide the conversations out of the project chosen, or whose title and text (every
        version) lack ``query``."""
        query = query.strip()
        files: list[Path] = []
        for item, conv in self._rows():
            if conv is not None and not self._shown(conv):
                item.setHidden(True)
            elif conv is None or not query:
                item.setHidden(False)
            elif conv.loaded:
                item.setHidden(not matches(conv, query))
            elif conv.path is None:
                item.setHidden(True)
            else:
                files.append(conv.path)
                if self._found[0] == query:
                    item.setHidden(conv.path not in self._found[1])
        if files:
            self.searcher.search(query, files)

    def _show_found(self, query: str, hits: frozenset[Path]) -> None:
        """The index's answer for the saved conversations not opened yet."""
        self._found = (query, hits)
        if self.search.text().strip() != query:
            return
        for item, conv in self._rows():
            if conv is not None and not conv.loaded and conv.path is not None and self._shown(conv):
                item.setHidden(conv.path not in hits)

    def _rows(self) -> list[tuple[QListWidgetItem, Conversation | None]]:
        library = self._library
        by_id = {c.id: c for c in library.conversations} if library is not None else {}
        return [(item, by_id.get(item.data(ID_ROLE)))
                for item in (self.list.item(i) for i in range(self.list.count()))]

    @staticmethod
    def _label(conv: Conversation) -> str:
        return conv.title + (" •" if conv.dirty else "")

    def _on_current(self, item: QListWidgetItem | None, _prev: QListWidgetItem | None) -> None:
        if item is not None:
            self.selected.emit(item.data(ID_ROLE))

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt's name
        if any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt's name
        """Exports dropped on the conversation list are imported (whatever their name); a
        conversation or a model opens as anywhere else."""
        files = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
        own = [f for f in files if f.suffix == SUFFIX or f.suffix.lower() == MODEL_SUFFIX]
        if own:
            self.files_dropped.emit(own)
        if len(own) < len(files):
            self.import_requested.emit([f for f in files if f not in own])
        event.acceptProposedAction()

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        cid = item.data(ID_ROLE)
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.rename_requested.emit(cid))
        menu.addAction("Delete", lambda: self.delete_requested.emit(cid))
        menu.exec(self.list.mapToGlobal(pos))
