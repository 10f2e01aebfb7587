"""The Tools dialog, with real MCP servers (the SDK's MCPServer over stdio)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox, QTreeWidgetItem
from pytestqt.qtbot import QtBot

from app.views.main_window import MainWindow
from app.views.tools_panel import Tools, ToolsDialog, tools_for
from engine.mcp import HostLimits, McpConfig, ServerConfig, ToolHost
from engine.mcp.config import load
from tests.engine.mcp.mcp_servers import stdio_args

START = 120.0  # generous: the machine is shared; an upper bound to wait, not a measurement
WAIT_MS = int(START * 1000)
SECRET = "greeting-secret-0042"
JSON = "MCP servers (*.json)"


def stdio_server(name: str, kind: str) -> ServerConfig:
    command, *args = stdio_args(kind)
    return ServerConfig.stdio(name, command, args)


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[Tools]:
    t = Tools(
        path=tmp_path / "mcp.json", host=ToolHost(HostLimits(start_timeout=START), log_dir=tmp_path / "logs")
    )
    yield t
    t.close()


@pytest.fixture
def dialog(qtbot: QtBot, tools: Tools) -> ToolsDialog:
    d = ToolsDialog(tools)
    qtbot.addWidget(d)
    d.show()
    return d


def item(dialog: ToolsDialog, server: str, tool: str | None = None) -> QTreeWidgetItem:
    top = dialog.server_item(server)
    assert top is not None, f"no item for {server}"
    if tool is None:
        return top
    return next(c for c in children(top) if c.text(0) == tool)


def children(top: QTreeWidgetItem) -> list[QTreeWidgetItem]:
    return [c for i in range(top.childCount()) if (c := top.child(i)) is not None]


def saved(tools: Tools, name: str) -> ServerConfig:
    server = load(tools.path).get(name)
    assert server is not None, f"{name} is not in {tools.path}"
    return server


def wait_state(qtbot: QtBot, dialog: ToolsDialog, server: str, prefix: str) -> None:
    qtbot.waitUntil(
        lambda: dialog.server_item(server) is not None and item(dialog, server).text(1).startswith(prefix),
        timeout=WAIT_MS,
    )


def test_add_a_server_by_command_and_see_it_ready(qtbot: QtBot, dialog: ToolsDialog, tools: Tools) -> None:
    qtbot.mouseClick(dialog.buttons["add"], Qt.MouseButton.LeftButton)
    editor = dialog.editor
    assert editor is not None and editor.isVisible()
    command, *args = stdio_args("friendly")
    editor.name.setText("friendly")
    editor.command.setText(command)
    editor.args.setPlainText("\n".join(args))
    editor.env.add_row("GREETING", SECRET)
    editor.accept()
    wait_state(qtbot, dialog, "friendly", "ready · 6 tools")
    top = item(dialog, "friendly")
    assert [c.text(0) for c in children(top)] == [
        "echo",
        "add",
        "picture",
        "env",
        "pid",
        "gate",
    ]
    assert item(dialog, "friendly", "add").text(1) == "Add two numbers."
    assert item(dialog, "friendly", "add").checkState(0) == Qt.CheckState.Checked
    assert saved(tools, "friendly") == ServerConfig.stdio("friendly", command, args, {"GREETING": SECRET})
    assert tools.host.call("friendly", "env", {"name": "GREETING"}).text == SECRET
    dialog.tree.setCurrentItem(top)
    assert "GREETING=gr…42" in dialog.details.text()
    assert SECRET not in dialog.details.text()
    assert all(SECRET not in top.text(c) for c in range(2))


def test_toggling_a_tool_and_a_server(qtbot: QtBot, dialog: ToolsDialog, tools: Tools) -> None:
    tools.set_config(McpConfig((stdio_server("friendly", "friendly"),)))
    wait_state(qtbot, dialog, "friendly", "ready")
    item(dialog, "friendly", "add").setCheckState(0, Qt.CheckState.Unchecked)
    assert saved(tools, "friendly").disabled_tools == {"add"}
    assert "add" not in [t.tool.name for t in tools.host.toolbox().tools]
    assert item(dialog, "friendly").text(1).startswith("ready")  # a tool's box does not restart it
    assert item(dialog, "friendly", "add").checkState(0) == Qt.CheckState.Unchecked
    item(dialog, "friendly").setCheckState(0, Qt.CheckState.Unchecked)
    wait_state(qtbot, dialog, "friendly", "disabled")
    assert tools.host.wait_for("friendly", ("stopped",), START).state == "stopped"
    assert not saved(tools, "friendly").enabled
    item(dialog, "friendly").setCheckState(0, Qt.CheckState.Checked)
    wait_state(qtbot, dialog, "friendly", "ready")
    assert item(dialog, "friendly", "add").checkState(0) == Qt.CheckState.Unchecked


def test_an_always_allowed_tool_says_so_and_can_ask_again(qtbot: QtBot, dialog: ToolsDialog,
                                                           tools: Tools) -> None:
    from dataclasses import replace

    server = replace(stdio_server("friendly", "friendly"), allowed_tools=frozenset({"add"}))
    tools.set_config(McpConfig((server,)))
    wait_state(qtbot, dialog, "friendly", "ready")
    assert item(dialog, "friendly", "add").text(1).startswith("always allowed")
    assert not item(dialog, "friendly", "echo").text(1).startswith("always allowed")
    dialog.tree.setCurrentItem(item(dialog, "friendly", "echo"))
    assert not dialog.buttons["ask"].isEnabled()
    dialog.tree.setCurrentItem(item(dialog, "friendly", "add"))
    assert dialog.buttons["ask"].isEnabled()
    qtbot.mouseClick(dialog.buttons["ask"], Qt.MouseButton.LeftButton)
    assert saved(tools, "friendly").allowed_tools == frozenset()
    qtbot.waitUntil(lambda: not item(dialog, "friendly", "add").text(1).startswith("always"),
                    timeout=WAIT_MS)


def test_import_adds_disabled_servers_to_enable(
    qtbot: QtBot, dialog: ToolsDialog, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command, *args = stdio_args("friendly")
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "friendly": {"command": command, "args": args, "env": {"TOKEN": SECRET}},
                    "remote": {
                        "url": "https://mcp.example.test/mcp",
                        "headers": {"Authorization": "Bearer abc-123-xyz"},
                    },
                }
            }
        )
    )
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(source), JSON))
    qtbot.mouseClick(dialog.buttons["import"], Qt.MouseButton.LeftButton)
    assert dialog.message.text() == "Imported friendly, remote (disabled: tick the ones you want to start)."
    wait_state(qtbot, dialog, "remote", "disabled")
    assert item(dialog, "friendly").text(1) == "disabled"
    assert tools.host.status("friendly").state == "stopped"
    item(dialog, "friendly").setCheckState(0, Qt.CheckState.Checked)
    wait_state(qtbot, dialog, "friendly", "ready")
    assert tools.host.status("remote").state == "stopped"
    qtbot.mouseClick(dialog.buttons["import"], Qt.MouseButton.LeftButton)
    assert dialog.message.text() == "Nothing new in claude_desktop_config.json."


def test_a_malformed_import_changes_nothing(
    qtbot: QtBot, dialog: ToolsDialog, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"x": {"command": "npx", "args": "-y thing"}}}')
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(bad), JSON))
    qtbot.mouseClick(dialog.buttons["import"], Qt.MouseButton.LeftButton)
    assert dialog.message.text() == "Nothing imported: mcpServers.x: 'args' must be a list of strings"
    assert tools.config == McpConfig()
    assert dialog.tree.topLevelItemCount() == 0


def test_export_writes_the_mcp_servers_json(
    qtbot: QtBot, dialog: ToolsDialog, tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools.set_config(
        McpConfig((ServerConfig.http("notes", "https://n.test/mcp", {"X-Key": SECRET}, enabled=False),))
    )
    out = tmp_path / "exported.json"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), JSON))
    qtbot.mouseClick(dialog.buttons["export"], Qt.MouseButton.LeftButton)
    assert json.loads(out.read_text()) == {
        "mcpServers": {"notes": {"url": "https://n.test/mcp", "headers": {"X-Key": SECRET}}}
    }
    assert dialog.message.text() == "Exported 1 server to exported.json."


def test_the_editor_refuses_bad_input_in_one_line(qtbot: QtBot, dialog: ToolsDialog, tools: Tools) -> None:
    tools.set_config(McpConfig((ServerConfig.stdio("taken", "npx", enabled=False),)))
    dialog.add_server()
    editor = dialog.editor
    assert editor is not None
    editor.name.setText("web")
    editor.kind.setCurrentIndex(1)
    editor.url.setText("localhost:8000/mcp")
    editor.accept()
    assert editor.isVisible()
    assert editor.error.text() == "server 'web': the URL must start with http:// or https://"
    editor.name.setText("taken")
    editor.url.setText("http://127.0.0.1:8000/mcp")
    editor.accept()
    assert editor.error.text() == "there is already a server named 'taken'"
    editor.name.setText("web")
    editor.accept()
    assert not editor.isVisible()
    assert tools.config.names() == ("taken", "web")


def test_edit_and_remove(
    qtbot: QtBot, dialog: ToolsDialog, tools: Tools, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools.set_config(McpConfig((stdio_server("friendly", "friendly"),)))
    wait_state(qtbot, dialog, "friendly", "ready")
    dialog.tree.setCurrentItem(item(dialog, "friendly"))
    qtbot.mouseClick(dialog.buttons["edit"], Qt.MouseButton.LeftButton)
    editor = dialog.editor
    assert editor is not None and editor.name.text() == "friendly"
    editor.name.setText("renamed")
    editor.env.add_row("GREETING", "hej")
    editor.accept()
    wait_state(qtbot, dialog, "renamed", "ready")
    assert tools.config.names() == ("renamed",)
    assert tools.host.call("renamed", "env", {"name": "GREETING"}).text == "hej"
    dialog.tree.setCurrentItem(item(dialog, "renamed"))
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    qtbot.mouseClick(dialog.buttons["remove"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.tree.topLevelItemCount() == 0, timeout=WAIT_MS)
    assert load(tools.path) == McpConfig()
    assert tools.host.wait_for("renamed", ("stopped",), START).state == "stopped"


def test_a_failed_server_shows_its_reason_as_text_and_restarts(
    qtbot: QtBot, dialog: ToolsDialog, tools: Tools
) -> None:
    says = "import sys; sys.stderr.write('<b>no</b> such <a href=x>key</a>'); sys.exit(1)"
    tools.set_config(McpConfig((ServerConfig.stdio("broken", sys.executable, ["-c", says]),)))
    reason = "failed: it closed the connection during start-up — stderr: <b>no</b> such <a href=x>key</a>"
    wait_state(qtbot, dialog, "broken", reason)
    dialog.tree.setCurrentItem(item(dialog, "broken"))
    assert dialog.details.textFormat() == Qt.TextFormat.PlainText  # what a server says is not markup
    assert dialog.details.text().endswith(f"State: {reason}")
    states: list[str] = []
    tools.host.add_listener(lambda status: states.append(status.state))
    qtbot.mouseClick(dialog.buttons["restart"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: states[-2:] == ["starting", "failed"], timeout=WAIT_MS)
    wait_state(qtbot, dialog, "broken", reason)


def test_the_main_window_opens_the_tools_dialog(window: MainWindow) -> None:
    settings = next(m for m in window.menuBar().findChildren(QMenu) if m.title() == "&Settings")
    entry = next(a for a in settings.actions() if a.text() == "&Tools (MCP servers)…")
    entry.trigger()
    dialog = window.findChild(ToolsDialog)
    assert dialog is not None and dialog.isVisible()
    tools = tools_for(window)
    assert tools.config == McpConfig() and tools.host.statuses() == ()
    dialog.close()
    tools.close()
