"""A published MCP server from the registry: mcp-server-time (the ``test`` extra), over stdio."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from mcp_testing import ready

from engine.mcp import McpConfig, ServerConfig, ToolHost


def time_server() -> str:
    """The console script pip installed next to this Python."""
    path = Path(sys.executable).parent / "mcp-server-time"
    found = str(path) if path.exists() else shutil.which("mcp-server-time")
    if found is None:
        pytest.fail("mcp-server-time is not installed: scripts/bootstrap.sh test installs it")
    return found


def test_the_time_server_lists_and_answers(host: ToolHost) -> None:
    host.apply(McpConfig((ServerConfig.stdio("time", time_server(), ["--local-timezone", "UTC"]),)))
    tools = {t.name: t for t in ready(host, "time").tools}
    assert set(tools) == {"get_current_time", "convert_time"}
    assert tools["convert_time"].input_schema["required"] == ["source_timezone", "time", "target_timezone"]
    result = host.call(
        "time", "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Kolkata"}
    )
    assert not result.is_error
    answer = json.loads(result.text)
    assert answer["target"]["datetime"].endswith("T17:30:00+05:30")
    assert answer["time_difference"] == "+5.5h"
    now = json.loads(host.call("time", "get_current_time", {"timezone": "UTC"}).text)
    assert now["timezone"] == "UTC" and now["datetime"].endswith("+00:00")
    wrong = host.call("time", "get_current_time", {"timezone": "Nowhere/City"})
    assert wrong.is_error and "Invalid timezone" in wrong.text
    spec = next(s for s in host.toolbox().specs() if s["function"]["name"] == "get_current_time")
    assert spec["function"]["parameters"]["properties"]["timezone"]["type"] == "string"
