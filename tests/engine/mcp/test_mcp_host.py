"""The tool host against a real MCP server (the SDK's MCPServer) over stdio."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from mcp_testing import START, ready, stdio_server

from engine.mcp import HostLimits, McpConfig, ServerConfig, ServerStatus, ToolConfigError, ToolHost
from engine.mcp.toolbox import FUNCTION_NAME


def test_lists_and_calls_tools_over_stdio(friendly: ToolHost) -> None:
    status = friendly.status("friendly")
    tools = {t.name: t for t in status.tools}
    assert {"echo", "add", "picture", "env", "gate"} <= set(tools)
    assert tools["add"].description == "Add two numbers."
    assert tools["add"].input_schema["properties"].keys() == {"a", "b"}
    assert friendly.call("friendly", "echo", {"text": "héllo\nworld"}).text == "héllo\nworld"
    result = friendly.call("friendly", "add", {"a": 2, "b": 40})
    assert (result.text, result.is_error, result.truncated) == ("42", False, False)
    assert friendly.call("friendly", "picture").text == "[image/png, 69 B]"


def test_the_server_gets_its_configured_environment_and_not_ours(
    host: ToolHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DUET_NOT_FOR_SERVERS", "private")
    host.apply(McpConfig((stdio_server("s", "friendly", {"GREETING": "bonjour"}),)))
    ready(host, "s")
    assert host.call("s", "env", {"name": "GREETING"}).text == "bonjour"
    assert host.call("s", "env", {"name": "DUET_NOT_FOR_SERVERS"}).text == "(unset)"


def test_nothing_starts_but_the_enabled_servers(host: ToolHost, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    off = ServerConfig.stdio("off", sys.executable, ["-c", f"open({str(marker)!r}, 'w')"], enabled=False)
    seen: list[ServerStatus] = []
    host.add_listener(seen.append)
    host.apply(McpConfig((off, stdio_server("on", "friendly")))).result()
    ready(host, "on")
    assert [s.name for s in seen if s.state == "starting"] == ["on"]
    assert host.status("off").state == "stopped"
    assert not marker.exists()
    with pytest.raises(ToolConfigError, match="disabled"):
        host.start("off")
    with pytest.raises(ToolConfigError, match="no server named"):
        host.start("nobody")
    assert host.call("off", "anything").text == "off/anything: the server 'off' is not enabled"


def test_disable_enable_and_remove(friendly: ToolHost) -> None:
    server = friendly.statuses()[0]
    config = McpConfig((stdio_server("friendly", "friendly"),))
    off = McpConfig((replace(config.servers[0], enabled=False),))
    friendly.apply(off).result()
    assert friendly.status("friendly").state == "stopped"
    assert friendly.toolbox().tools == ()
    friendly.apply(config)
    assert ready(friendly, "friendly").tools == server.tools
    friendly.apply(McpConfig()).result()
    assert friendly.statuses() == ()
    assert friendly.status("friendly").state == "stopped"


def test_toggling_a_tool_keeps_the_server_running(friendly: ToolHost) -> None:
    seen: list[ServerStatus] = []
    friendly.add_listener(seen.append)
    server = stdio_server("friendly", "friendly")
    friendly.apply(McpConfig((replace(server, disabled_tools=frozenset({"add"})),))).result()
    assert [s.state for s in seen if s.name == "friendly"] == []  # no restart
    assert friendly.status("friendly").state == "ready"
    assert "add" not in [t.tool.name for t in friendly.toolbox().tools]
    assert friendly.call("friendly", "add", {"a": 1, "b": 2}).text == "friendly/add: this tool is disabled"
    friendly.apply(McpConfig((server,))).result()
    assert friendly.call("friendly", "add", {"a": 1, "b": 2}).text == "3"


def test_an_edited_server_restarts_with_its_new_definition(friendly: ToolHost) -> None:
    friendly.apply(McpConfig((stdio_server("friendly", "friendly", {"GREETING": "hej"}),)))
    status = friendly.wait_for("friendly", ("starting",), START)
    assert status.state == "starting"
    ready(friendly, "friendly")
    assert friendly.call("friendly", "env", {"name": "GREETING"}).text == "hej"


def test_toolbox_names_are_valid_and_map_back(host: ToolHost) -> None:
    host.apply(McpConfig((stdio_server("one", "friendly"), stdio_server("two.b", "friendly"))))
    ready(host, "one")
    ready(host, "two.b")
    box = host.toolbox()
    names = box.names()
    assert len(set(names)) == len(names) == 12
    assert all(FUNCTION_NAME.match(n) for n in names)
    assert box.resolve("two_b__echo") == ("two.b", "echo")
    spec = next(s for s in box.specs() if s["function"]["name"] == "one__add")
    assert spec["type"] == "function"
    assert spec["function"]["description"] == "Add two numbers."
    assert spec["function"]["parameters"]["required"] == ["a", "b"]
    server, tool = box.resolve("one__add") or ("", "")
    assert host.call(server, tool, {"a": 1, "b": 1}).text == "2"


@pytest.mark.parametrize(
    "command, args, expected",
    [
        ("/nonexistent/mcp-server", [], "No such file or directory '/nonexistent/mcp-server'"),
        (
            sys.executable,
            ["-c", "import sys; sys.stderr.write('config: API key missing\\n'); sys.exit(2)"],
            "it closed the connection during start-up — stderr: config: API key missing",
        ),
    ],
)
def test_a_server_that_cannot_start_fails_with_one_line(
    host: ToolHost, command: str, args: list[str], expected: str
) -> None:
    host.apply(McpConfig((ServerConfig.stdio("bad", command, args), stdio_server("good", "friendly"))))
    status = host.wait_for("bad", ("failed", "ready"), START)
    assert (status.state, status.reason) == ("failed", expected)
    ready(host, "good")
    assert host.call("bad", "echo").text == f"bad/echo: the server is failed ({expected})"
    host.apply(
        McpConfig((ServerConfig.stdio("bad", command, args), stdio_server("good", "friendly")))
    ).result()
    assert host.status("bad").state == "failed"  # not retried until it changes or is restarted


def test_a_server_that_never_answers_the_handshake_times_out(tmp_path: Path) -> None:
    silent = ServerConfig.stdio("silent", sys.executable, ["-c", "import time; time.sleep(3600)"])
    with ToolHost(HostLimits(start_timeout=1.0), log_dir=tmp_path) as host:
        host.apply(McpConfig((silent,)))
        status = host.wait_for("silent", ("failed", "ready"), START)
    assert (status.state, status.reason) == ("failed", "it did not answer within the start-up time")


def test_calls_that_cannot_be_made_give_one_line(friendly: ToolHost) -> None:
    assert friendly.call("nobody", "echo").text == "nobody/echo: the server 'nobody' is not enabled"
    assert friendly.call("friendly", "nope").text == "friendly/nope: the server has no such tool"
    not_an_object: Any = ["not", "an", "object"]
    bad_args = friendly.call("friendly", "echo", not_an_object)
    assert bad_args.text == "friendly/echo: the arguments must be a JSON object"
    wrong = friendly.call("friendly", "add", {"a": "one"})  # the server's own error result, as it is
    assert wrong.is_error and wrong.text.startswith("Error executing tool add: 2 validation errors")


def test_close_stops_the_servers(tmp_path: Path) -> None:
    host = ToolHost(log_dir=tmp_path)
    host.apply(McpConfig((stdio_server("s", "friendly"),)))
    ready(host, "s")
    pid = int(host.call("s", "pid").text)
    os.kill(pid, 0)  # alive
    host.close()
    host.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert host.call("s", "echo", {"text": "x"}).text == "the tool host is closed"
    with pytest.raises(RuntimeError):
        host.apply(McpConfig())
