"""Adding or editing one MCP server: a command (+ arguments, one per line, and environment) or
a URL (+ headers). Environment and header values are typed into masked fields."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.mcp import ServerConfig, ToolConfigError
from engine.mcp.session import INHERITED_ENV


def plain_label(parent: QWidget) -> QLabel:
    """A label that shows text as text: what servers send is never rendered as rich text."""
    label = QLabel(parent)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class PairsTable(QWidget):
    """Names and secret values (environment or headers); the values are typed masked."""

    def __init__(self, pairs: Iterable[tuple[str, str]], what: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.table = QTableWidget(0, 2, self)
        self.table.setHorizontalHeaderLabels([what, "Value"])
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        add, remove = QPushButton("Add", self), QPushButton("Remove", self)
        add.clicked.connect(lambda: self.add_row("", ""))
        remove.clicked.connect(lambda: self.table.removeRow(self.table.currentRow()))
        for key, value in pairs:
            self.add_row(key, value)
        buttons = QHBoxLayout()
        buttons.addWidget(add)
        buttons.addWidget(remove)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table)
        layout.addLayout(buttons)

    def add_row(self, key: str, value: str) -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        self.table.setItem(row, 0, QTableWidgetItem(key))
        field = QLineEdit(value, self.table)
        field.setEchoMode(QLineEdit.EchoMode.Password)
        self.table.setCellWidget(row, 1, field)

    def pairs(self) -> dict[str, str]:
        out = {}
        for row in range(self.table.rowCount()):
            item, field = self.table.item(row, 0), self.table.cellWidget(row, 1)
            key = item.text().strip() if item is not None else ""
            if key and isinstance(field, QLineEdit):
                out[key] = field.text()
        return out


class ServerEditor(QDialog):
    """Add or edit one server; OK checks it and sets ``result_server`` (errors in one line)."""

    def __init__(self, server: ServerConfig | None, taken: set[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Edit server" if server else "Add a server")
        self.original, self.taken = server, taken
        self.result_server: ServerConfig | None = None
        self.name = QLineEdit(server.name if server else "", self)
        self.kind = QComboBox(self)
        self.kind.addItems(["Command (stdio)", "URL (Streamable HTTP)"])
        self.command = QLineEdit(server.command if server else "", self)
        self.command.setPlaceholderText("npx, uvx, docker, or the full path of a program")
        self.args = QPlainTextEdit("\n".join(server.args) if server else "", self)
        self.args.setPlaceholderText("One argument per line, exactly as the program gets it (no shell)")
        self.env = PairsTable(server.env if server else (), "Variable", self)
        self.url = QLineEdit(server.url if server else "", self)
        self.url.setPlaceholderText("http://127.0.0.1:8000/mcp")
        self.headers = PairsTable(server.headers if server else (), "Header", self)
        stdio_page, http_page = QWidget(self), QWidget(self)
        stdio_form, http_form = QFormLayout(stdio_page), QFormLayout(http_page)
        stdio_form.addRow("Command", self.command)
        stdio_form.addRow("Arguments", self.args)
        stdio_form.addRow("Environment", self.env)
        inherited = QLabel(f"The program also gets {', '.join(INHERITED_ENV)}: nothing else of "
                           "Duet's environment.", self)
        inherited.setWordWrap(True)
        stdio_form.addRow("", inherited)
        http_form.addRow("URL", self.url)
        http_form.addRow("Headers", self.headers)
        self.pages = QStackedWidget(self)
        self.pages.addWidget(stdio_page)
        self.pages.addWidget(http_page)
        self.kind.currentIndexChanged.connect(self.pages.setCurrentIndex)
        self.kind.setCurrentIndex(1 if server and server.url else 0)
        self.error = plain_label(self)
        self.error.setStyleSheet("color: #b00020;")
        ok_cancel = QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        buttons = QDialogButtonBox(ok_cancel, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("Kind", self.kind)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.pages, 1)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        self.resize(560, 480)

    def server(self) -> ServerConfig:
        """The server as entered; ToolConfigError (one line) when it is not usable."""
        name = self.name.text().strip()
        if name in self.taken:
            raise ToolConfigError(f"there is already a server named {name!r}")
        kept = {} if self.original is None else {"enabled": self.original.enabled,
                                                 "disabled_tools": self.original.disabled_tools,
                                                 "allowed_tools": self.original.allowed_tools}
        if self.kind.currentIndex() == 0:
            args = [line for line in self.args.toPlainText().split("\n") if line != ""]
            return ServerConfig.stdio(name, self.command.text().strip(), args, self.env.pairs(), **kept)
        return ServerConfig.http(name, self.url.text().strip(), self.headers.pairs(), **kept)

    def accept(self) -> None:
        try:
            self.result_server = self.server()
        except ToolConfigError as e:
            self.error.setText(str(e))
            return
        super().accept()
