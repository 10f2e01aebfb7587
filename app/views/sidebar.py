"""The conversation list: new, open, rename, delete (the window does the work), search, the
projects that narrow both (app.views.projects_view), and exports dropped on it to import.

The search matches the conversations open in the app in memory, and the saved ones not opened
yet through the search index, off the GUI thread (app.control.search): their rows change when its
answer comes, and meanwhile keep the last answer for the same query.

The rows are a list model (ConversationRows) shown by a QListView: a new list of conversations
is one model reset, with nothing made per row (10,000 QListWidgetItems held the GUI thread
about 0.1 s, scripts/bench_import_gui.py); another conversation shown or a title changed
changes only the rows that differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QItemSelectionModel,
    QMimeData,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    Qt,
    Signal,
)
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLineEdit,
    QListView,
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


Row = tuple[str, str, str]  # (id, label, tooltip)
Index = QModelIndex | QPersistentModelIndex


class ConversationRows(QAbstractListModel):
    """The rows of the list; they drag out as the ids of their conversations (onto a project)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[Row] = []

    def set_rows(self, rows: list[Row]) -> bool:
        """Show ``rows``; True when that was a reset (other conversations, not only other
        labels)."""
        if [r[0] for r in rows] != [r[0] for r in self.rows]:
            self.beginResetModel()
            self.rows = rows
            self.endResetModel()
            return True
        was, self.rows = self.rows, rows
        for i, (row, old) in enumerate(zip(rows, was)):
            if row != old:
                self.dataChanged.emit(self.index(i), self.index(i))
        return False

    def rowCount(self, parent: Index | None = None) -> int:  # noqa: N802 - Qt's name
        return 0 if parent is not None and parent.isValid() else len(self.rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self.rows):
            return None
        cid, label, tip = self.rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return label
        if role == Qt.ItemDataRole.ToolTipRole:
            return tip
        if role == ID_ROLE:
            return cid
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | \
            Qt.ItemFlag.ItemIsDragEnabled

    def mimeTypes(self) -> list[str]:  # noqa: N802 - Qt's name
        return [MIME]

    def mimeData(self, indexes: Sequence[QModelIndex]) -> QMimeData:  # noqa: N802 - Qt's name
        return conversation_mime([self.rows[i.row()][0] for i in indexes if i.isValid()])


class ConversationList(QListView):
    """The conversations' rows (``rows``, the model); what tests and the window ask of them by
    row number."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows = ConversationRows(self)
        self.setModel(self.rows)

    def count(self) -> int:
        return len(self.rows.rows)

    def text(self, row: int) -> str:
        return self.rows.rows[row][1]

    def id_at(self, row: int) -> str:
        return self.rows.rows[row][0]

    def shown_texts(self) -> list[str]:
        """The labels of the rows not hidden (by the search or the project chosen)."""
        return [r[1] for i, r in enumerate(self.rows.rows) if not self.isRowHidden(i)]

    def current_text(self) -> str | None:
        row = self.currentIndex().row()
        return self.text(row) if self.currentIndex().isValid() else None

    def selected_ids(self) -> list[str]:
        return [self.id_at(i.row()) for i in self.selectionModel().selectedRows()]

    def set_current_row(self, row: int) -> None:
        """Mark row ``row`` (-1: none) as the current and only selected one."""
        selection = self.selectionModel()
        if row < 0:
            selection.clear()
            return
        selection.setCurrentIndex(self.rows.index(row),
                                  QItemSelectionModel.SelectionFlag.ClearAndSelect)


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
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setDragEnabled(True)
        self.list.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setUniformItemSizes(True)
        self.setAcceptDrops(True)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.selectionModel().currentChanged.connect(self._on_current)
        self.list.doubleClicked.connect(lambda index: self.rename_requested.emit(
            self.list.id_at(index.row())))
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
        order (another one shown, a title changed) change only the rows that differ."""
        rows = [(c.id, self._label(c), str(c.path) if c.path else "Not saved yet")
                for c in conversations]
        ids = [r[0] for r in rows]
        self.list.selectionModel().blockSignals(True)
        reset = self.list.rows.set_rows(rows)
        self.list.set_current_row(ids.index(current) if current in ids else -1)
        self.list.selectionModel().blockSignals(False)
        if reset and (self.search.text().strip() or
                      self._flow is not None and self._flow.selected is not None):
            self._filter(self.search.text())  # (a reset shows every row again)

    def _shown(self, conv: Conversation) -> bool:
        """In the project chosen (or none is)."""
        return self._flow is None or self._flow.shows(conv)

    def _filter(self, query: str) -> None:
        """Hide the conversations out of the project chosen, or whose title and text (every
        version) lack ``query``."""
        query = query.strip()
        files: list[Path] = []
        hide = self.list.setRowHidden
        for row, conv in self._rows():
            if conv is not None and not self._shown(conv):
                hide(row, True)
            elif conv is None or not query:
                hide(row, False)
            elif conv.loaded:
                hide(row, not matches(conv, query))
            elif conv.path is None:
                hide(row, True)
            else:
                files.append(conv.path)
                if self._found[0] == query:
                    hide(row, conv.path not in self._found[1])
        if files:
            self.searcher.search(query, files)

    def _show_found(self, query: str, hits: frozenset[Path]) -> None:
        """The index's answer for the saved conversations not opened yet."""
        self._found = (query, hits)
        if self.search.text().strip() != query:
            return
        for row, conv in self._rows():
            if conv is not None and not conv.loaded and conv.path is not None and self._shown(conv):
                self.list.setRowHidden(row, conv.path not in hits)

    def _rows(self) -> list[tuple[int, Conversation | None]]:
        """Each row's number and conversation."""
        library = self._library
        by_id = {c.id: c for c in library.conversations} if library is not None else {}
        return [(i, by_id.get(r[0])) for i, r in enumerate(self.list.rows.rows)]

    @staticmethod
    def _label(conv: Conversation) -> str:
        return conv.title + (" •" if conv.dirty else "")

    def _on_current(self, index: QModelIndex, _prev: QModelIndex) -> None:
        if index.isValid():
            self.selected.emit(self.list.id_at(index.row()))

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
        index = self.list.indexAt(pos)
        if not index.isValid():
            return
        cid = self.list.id_at(index.row())
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.rename_requested.emit(cid))
        menu.addAction("Delete", lambda: self.delete_requested.emit(cid))
        menu.exec(self.list.mapToGlobal(pos))
