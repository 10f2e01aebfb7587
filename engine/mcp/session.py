"""Opening one MCP server with the SDK's client, listing its tools, and errors as one line.

A stdio server is started by ``mcp.client.stdio.stdio_client`` with exactly the configured
command and arguments (no shell), the SDK's small default environment plus the configured
variables, and its stderr in a log file. A URL is reached with ``streamable_http_client``
through an ``httpx2`` client that carries the configured headers.
"""

from __future__ import annotations

import re
from contextlib import AsyncExitStack
from typing import TextIO

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

import engine
from engine.mcp.config import ServerConfig, redact
from engine.mcp.toolbox import ToolInfo

INHERITED_ENV = tuple(DEFAULT_INHERITED_ENV_VARS)  # what a stdio server gets of our environment
MAX_PAGES = 100
MAX_LINE = 300
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


CLIENT_INFO = types.Implementation(name="duet", version=engine.version())


def leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def one_line(exc: BaseException, secrets: tuple[str, ...] = ()) -> str:
    """An exception as one short line with the server's secrets masked."""
    exc = leaf(exc)
    if isinstance(exc, OSError) and exc.strerror:
        target = f" {exc.filename!r}" if exc.filename else ""
        text = f"{exc.strerror}{target}"
    else:
        text = str(getattr(exc, "message", "") or exc) or type(exc).__name__
    text = re.sub(r"\s+", " ", text).strip()
    text = redact(text, secrets)
    return text if len(text) <= MAX_LINE else text[:MAX_LINE - 1] + "…"


def start_failure(exc: BaseException, server: ServerConfig) -> str:
    """Why ``server`` did not start, in one line."""
    inner = leaf(exc)
    if isinstance(inner, TimeoutError):
        return "it did not answer within the start-up time"
    if isinstance(inner, MCPError) and inner.code == CONNECTION_CLOSED:
        return "it closed the connection during start-up"
    if isinstance(inner, httpx2.TransportError):
        return f"cannot reach {server.url}: {one_line(inner, server.secrets)}"
    return one_line(inner, server.secrets)


async def open_client(server: ServerConfig, stack: AsyncExitStack, *, errlog: TextIO,
                      max_sse_event_bytes: int) -> Client:
    """A connected, initialised client for ``server``; closed when ``stack`` unwinds."""
    if server.command:
        params = StdioServerParameters(command=server.command, args=list(server.args),
                                       env=dict(server.env) or None)
        transport = stdio_client(params, errlog=errlog)
    else:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=dict(server.headers), timeout=HTTP_TIMEOUT))
        transport = streamable_http_client(server.url, http_client=http,
                                           max_sse_event_size=max_sse_event_bytes)
    return await stack.enter_async_context(Client(transport, client_info=CLIENT_INFO))


async def list_tools(client: Client) -> tuple[ToolInfo, ...]:
    """Every tool the server lists, following pages (at most MAX_PAGES)."""
    tools: list[ToolInfo] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += [ToolInfo(t.name, t.description or t.title or "", t.input_schema) for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            break
    return tuple(tools)
