"""A tool host per test (closed after it) and the test servers' definitions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.mcp import HostLimits, McpConfig, ServerConfig, ServerStatus, ToolHost
from mcp_servers import stdio_args

START = 120.0  # generous: the machine is shared; these are upper bounds, not measurements


def stdio_server(name: str, kind: str, env: dict[str, str] | None = None) -> ServerConfig:
    command, *args = stdio_args(kind)
    return ServerConfig.stdio(name, command, args, env)


def ready(host: ToolHost, name: str) -> ServerStatus:
    status = host.wait_for(name, ("ready", "failed"), START)
    assert status.state == "ready", status
    return status


@pytest.fixture
def host(tmp_path: Path) -> Iterator[ToolHost]:
    with ToolHost(HostLimits(start_timeout=START), log_dir=tmp_path / "logs") as h:
        yield h


@pytest.fixture
def friendly(host: ToolHost) -> ToolHost:
    """The host with the friendly server running over stdio as ``friendly``."""
    host.apply(McpConfig((stdio_server("friendly", "friendly"),)))
    ready(host, "friendly")
    return host
