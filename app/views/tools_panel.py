"""The Tools dialog: the person's MCP servers, their state and their tools.

:class:`Tools` owns the servers file (``mcp.json``) and the engine's :class:`ToolHost`; every
change is saved at once and applied to the running servers (the dialog has no OK). The tree
lists each server (its checkbox enables it; its state and reason beside it) and under it each
tool (its checkbox offers it to the model; its description beside it). Servers are added and
edited in ``app.views.tools_editor``, removed, restarted, imported from and exported to the
``mcpServers`` JSON of other apps. Environment and
header values are shown masked; everything a server sends is shown as plain text.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.views.tools_editor import ServerEditor, plain_label
from engine.mcp import McpConfig, ServerConfig, ServerStatus, ToolConfigError, ToolHost, mask
from engine.mcp import config as mcp_config
from engine.mcp.interchange import read_servers, write_servers

log = logging.getLogger(__name__)

JSON_FILTER = "MCP servers (*.json);;All files (*)"
SERVER_ROLE = Qt.ItemDataRole.UserRole
TOOL_ROLE = Qt.ItemDataRole.UserRole + 1
CHECKED, UNCHECKED = Qt.CheckState.Checked, Qt.CheckState.Unchecked


class Tools(QObject):
    """The servers file and the running servers. ``status_changed(ServerStatus)`` arrives on
    the GUI thread; ``config_changed()`` after every saved change."""

    status_changed = Signal(object)
    config_changed = Signal()

    def __init__(self, parent: QObject | None = None, *, path: Path | None = None,
                 host: ToolHost | None = None) -> None:
        super().__init__(parent)
        self.path = path or mcp_config.config_path()
        self.config = mcp_config.load(self.path)
        self.host = host or ToolHost()
        self._listener = self.status_changed.emit  # queued to this object's thread
        self.host.add_listener(self._listener)
        self.host.apply(self.config)
        self.destroyed.connect(partial(_release, self.host, self._listener))
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.close)

    def set_config(self, config: McpConfig) -> str:
        """Save and apply ``config``; "" or a one-line reason it could not be saved (it is
        applied anyway, so the running servers follow what the dialog shows)."""
        self.config = config
        error = ""
        try:
            mcp_config.save(config, self.path)
        except OSError as e:
            error = f"Cannot save the servers to {self.path}: {e.strerror or e}"
            log.warning("%s", error)
        self.host.apply(config)
        self.config_changed.emit()
        return error

    def close(self) -> None:
        """Stop every server (also done when this object is destroyed)."""
        _release(self.host, self._listener)


def _release(host: ToolHost, listener: Callable[[ServerStatus], None]) -> None:
    host.remove_listener(listener)
    host.close()


def tools_for(window: QWidget) -> Tools:
    """The one :class:`Tools` of ``window``, made (and its servers started) on first use."""
    return window.findChild(Tools) or Tools(window)


def open_tools_dialog(window: QWidget) -> ToolsDialog:
    dialog = ToolsDialog(tools_for(window), window)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog


def state_text(server: ServerConfig, status: ServerStatus) -> str:
    if not server.enabled:
        return "disabled"
    if status.state == "ready":
        n = len(status.tools)
        return f"ready · {n} tool{'s' if n != 1 else ''}"
    if status.state == "failed":
        return f"failed: {status.reason}"
    return {"starting": "starting…", "stopped": "stopped"}[status.state]


def describe(server: ServerConfig) -> str:
    """How ``server`` is started, with its secrets masked (plain text)."""
    lines = [f"Command: {shlex.join(server.launch())}" if server.command else f"URL: {server.url}"]
    for title, values in (("Environment", server.env), ("Headers", server.headers)):
        if values:
            lines.append(f"{title}: " + ", ".join(f"{k}={mask(v)}" for k, v in values))
    return "\n".join(lines)


class ToolsDialog(QDialog):
    def __init__(self, tools: Tools, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Tools (MCP servers)")
        self.tools = tools
        self.editor: ServerEditor | None = None
        self.tree = QTreeWidget(self)
        self.tree.setColumnCount(2)
        self.tree.setHeaderLabels(["Server / tool", "State / description"])
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.itemChanged.connect(self._on_item_changed)
        self.tree.currentItemChanged.connect(self._show_details)
        self.details = plain_label(self)
        self.message = plain_label(self)
        self.buttons: dict[str, QPushButton] = {}
        row = QHBoxLayout()
        for key, text, slot in (("add", "Add…", self.add_server), ("edit", "Edit…", self.edit_server),
                                ("remove", "Remove", self.remove_server),
                                ("restart", "Restart", self.restart_server),
                                ("ask", "Ask before each call", self.ask_again),
                                ("import", "Import…", self.import_dialog),
                                ("export", "Export…", self.export_dialog)):
            self.buttons[key] = button = QPushButton(text, self)
            button.clicked.connect(slot)
            row.addWidget(button)
        row.addStretch(1)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        close.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Servers the model may use. Nothing starts until you enable it.", self))
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.details)
        layout.addLayout(row)
        layout.addWidget(self.message)
        layout.addWidget(close)
        tools.status_changed.connect(self._on_status)
        # Queued: a change made from a checkbox of the tree must not rebuild the tree while
        # Qt is still inside that item's signal.
        tools.config_changed.connect(self.refresh, Qt.ConnectionType.QueuedConnection)
        self.refresh()
        self.resize(720, 520)

    # -- the tree --------------------------------------------------------------------------
    def refresh(self) -> None:
        """Rebuild the tree from the configuration and the host, keeping the selection."""
        current, tool = self.selected(), self._selected_tool()
        collapsed = {top.data(0, SERVER_ROLE) for top in self._tops() if not top.isExpanded()}
        self.tree.blockSignals(True)
        self.tree.clear()
        for server in self.tools.config.servers:
            status = self.tools.host.status(server.name)
            item = QTreeWidgetItem([server.name, state_text(server, status)])
            item.setData(0, SERVER_ROLE, server.name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(0, CHECKED if server.enabled else UNCHECKED)
            for t in status.tools:
                line = t.description.strip().split("\n", 1)[0]
                if t.name in server.allowed_tools:
                    line = f"always allowed · {line}"
                child = QTreeWidgetItem([t.name, line])
                child.setData(0, SERVER_ROLE, server.name)
                child.setData(0, TOOL_ROLE, t.name)
                child.setFlags(child.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                child.setCheckState(0, UNCHECKED if t.name in server.disabled_tools else CHECKED)
                item.addChild(child)
            self.tree.addTopLevelItem(item)
            item.setExpanded(server.name not in collapsed)
            if server.name == current:
                match = [c for c in _children(item) if c.data(0, TOOL_ROLE) == tool]
                self.tree.setCurrentItem(match[0] if match else item)
        self.tree.blockSignals(False)
        self._show_details()

    def selected(self) -> str | None:
        item = self.tree.currentItem()
        return item.data(0, SERVER_ROLE) if item is not None else None

    def _selected_tool(self) -> str | None:
        item = self.tree.currentItem()
        return item.data(0, TOOL_ROLE) if item is not None else None

    def _tops(self) -> list[QTreeWidgetItem]:
        items = (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount()))
        return [t for t in items if t is not None]

    def server_item(self, name: str) -> QTreeWidgetItem | None:
        return next((t for t in self._tops() if t.data(0, SERVER_ROLE) == name), None)

    def _on_status(self, status: ServerStatus) -> None:
        if self.tools.config.get(status.name) is not None:
            self.refresh()

    def _on_item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        server = self.tools.config.get(item.data(0, SERVER_ROLE))
        if column != 0 or server is None:
            return
        on = item.checkState(0) == CHECKED
        tool = item.data(0, TOOL_ROLE)
        if tool is None:
            changed = replace(server, enabled=on)
        else:
            changed = replace(server, disabled_tools=server.disabled_tools - {tool} if on
                              else server.disabled_tools | {tool})
        self._save(self.tools.config.put(changed))

    def _show_details(self, *_: object) -> None:
        name = self.selected()
        server = self.tools.config.get(name) if name else None
        for key in ("edit", "remove", "restart"):
            self.buttons[key].setEnabled(server is not None)
        self.buttons["ask"].setEnabled(server is not None and
                                       self._selected_tool() in server.allowed_tools)
        if server is None:
            self.details.setText("")
            return
        status = self.tools.host.status(server.name)
        text = f"{describe(server)}\nState: {state_text(server, status)}"
        tool = self._selected_tool()
        found = next((t for t in status.tools if t.name == tool), None)
        if found is not None:
            text = f"{found.name}: {found.description.strip()}"
        self.details.setText(text)

    def _save(self, config: McpConfig, done: str = "") -> None:
        """Save and apply ``config``; the message says ``done``, or why it was not saved."""
        self.message.setText(self.tools.set_config(config) or done)

    # -- buttons ---------------------------------------------------------------------------
    def ask_again(self) -> None:
        """The selected tool was always allowed: its calls wait for the person again."""
        name, tool = self.selected(), self._selected_tool()
        server = self.tools.config.get(name) if name else None
        if server is None or tool is None or tool not in server.allowed_tools:
            return
        self._save(self.tools.config.put(replace(server, allowed_tools=server.allowed_tools - {tool})),
                   f"Calls of {tool} will ask you first.")

    def add_server(self) -> None:
        self._open_editor(None)

    def edit_server(self) -> None:
        server = self.tools.config.get(self.selected() or "")
        if server is not None:
            self._open_editor(server)

    def _open_editor(self, server: ServerConfig | None) -> None:
        taken = set(self.tools.config.names()) - ({server.name} if server else set())
        self.editor = ServerEditor(server, taken, self)
        self.editor.accepted.connect(self._editor_done)
        self.editor.open()

    def _editor_done(self) -> None:
        editor = self.editor
        if editor is None or editor.result_server is None:
            return
        replacing = editor.original.name if editor.original else None
        self._save(self.tools.config.put(editor.result_server, replacing=replacing),
                   f"Saved {editor.result_server.name}.")

    def remove_server(self) -> None:
        name = self.selected()
        if name is None:
            return
        answer = QMessageBox.question(self, "Remove server", f"Remove the server “{name}” and its settings?")
        if answer == QMessageBox.StandardButton.Yes:
            self._save(self.tools.config.without(name))

    def restart_server(self) -> None:
        name = self.selected()
        if name is None:
            return
        try:
            self.tools.host.restart(name)
        except ToolConfigError as e:
            self.message.setText(str(e))

    def import_dialog(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Import MCP servers", str(Path.home()), JSON_FILTER)
        if name:
            self.import_from(Path(name))

    def import_from(self, path: Path) -> None:
        try:
            servers = read_servers(path)
        except ToolConfigError as e:
            self.message.setText(f"Nothing imported: {e}")
            return
        config, added = self.tools.config.merged(servers)
        if not added:
            self.message.setText(f"Nothing new in {path.name}.")
            return
        self._save(config, f"Imported {', '.join(added)} (disabled: tick the ones you want to start).")

    def export_dialog(self) -> None:
        name, _ = QFileDialog.getSaveFileName(self, "Export MCP servers (with their environment and headers)",
                                              str(Path.home() / "mcp.json"), JSON_FILTER)
        if name:
            self.export_to(Path(name))

    def export_to(self, path: Path) -> None:
        try:
            write_servers(path, self.tools.config.servers)
        except (OSError, ValueError) as e:
            self.message.setText(f"Cannot export to {path}: {getattr(e, 'strerror', None) or e}")
            return
        n = len(self.tools.config.servers)
        self.message.setText(f"Exported {n} server{'s' if n != 1 else ''} to {path.name}.")


def _children(item: QTreeWidgetItem) -> list[QTreeWidgetItem]:
    return [c for i in range(item.childCount()) if (c := item.child(i)) is not None]
