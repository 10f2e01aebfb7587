"""Helpers shared by the MCP tests (engine and app): the test servers' definitions, waits."""

from __future__ import annotations

from mcp_servers import stdio_args

from engine.mcp import ServerConfig, ServerStatus, ToolHost

START = 120.0  # generous: the machine is shared; an upper bound to wait, not a measurement


def stdio_server(name: str, kind: str, env: dict[str, str] | None = None) -> ServerConfig:
    command, *args = stdio_args(kind)
    return ServerConfig.stdio(name, command, args, env)


def ready(host: ToolHost, name: str) -> ServerStatus:
    status = host.wait_for(name, ("ready", "failed"), START)
    assert status.state == "ready", status
    return status
