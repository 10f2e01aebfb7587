"""The tool host: the person's MCP servers, run on one asyncio loop in one background thread.

Every method is synchronous and thread-safe; the GUI and the engine call them from their own
threads. Each enabled server has one task on the loop that opens the SDK's client, lists the
tools and then holds the connection until it is stopped; calls to its tools run as their own
tasks on the same loop. Nothing starts except the enabled servers of the configuration given
to :meth:`ToolHost.apply` (or named to :meth:`ToolHost.start`).

A server's :class:`ServerStatus` is ``starting``, ``ready`` (with its tools), ``failed`` (with a
one-line reason) or ``stopped``; listeners hear each change on the loop's thread (they must
return quickly and never wait on the host). :meth:`ToolHost.call` never raises: a timeout, a
crash, a cancel or an error of the server comes back as a one-line error result, and a server
whose connection is lost during a call becomes ``failed``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import threading
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from engine import paths
from engine.mcp.config import McpConfig, ServerConfig, ToolConfigError, redact
from engine.mcp.content import tool_result
from engine.mcp.session import list_tools, one_line, open_client, start_failure
from engine.mcp.toolbox import Toolbox, ToolInfo, build_toolbox
from engine.tools.calls import ToolResult

log = logging.getLogger(__name__)

State = Literal["stopped", "starting", "ready", "failed"]
Listener = Callable[["ServerStatus"], None]
CANCEL_POLL = 0.05  # seconds between looks at a call's cancel event


@dataclass(frozen=True)
class HostLimits:
    """Bounds on what servers may cost: characters of a result kept, seconds to start and
    (by default) to answer a call, bytes of one Streamable HTTP event."""

    result_chars: int = 100_000
    start_timeout: float = 60.0
    call_timeout: float = 120.0
    max_sse_event_bytes: int = 64 << 20


@dataclass(frozen=True)
class ServerStatus:
    name: str
    state: State = "stopped"
    reason: str = ""
    tools: tuple[ToolInfo, ...] = ()


@dataclass
class _Run:
    """One server's connection; touched only on the loop's thread."""

    server: ServerConfig
    task: asyncio.Task[None] | None = None
    client: Client | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    was_ready: bool = False
    lost: str = ""


class ToolHost:
    def __init__(self, limits: HostLimits = HostLimits(), *, log_dir: Path | None = None) -> None:
        self.limits = limits
        self.log_dir = log_dir or paths.cache_dir() / "mcp"
        self._config = McpConfig()
        self._statuses: dict[str, ServerStatus] = {}
        self._changed = threading.Condition()
        self._listeners: list[Listener] = []
        self._runs: dict[str, _Run] = {}
        self._serial = asyncio.Lock()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-tool-host", daemon=True)
        self._thread.start()

    # -- the synchronous API ---------------------------------------------------------------
    def apply(self, config: McpConfig) -> concurrent.futures.Future[None]:
        """Make the running servers those enabled in ``config``: start the new ones, stop the
        removed or disabled ones, restart the ones whose command, URL, environment or headers
        changed. A failed server stays failed until it changes or is restarted."""
        with self._changed:
            self._config = config
        return self._submit(self._apply(config))

    def start(self, name: str) -> concurrent.futures.Future[None]:
        """Start ``name`` if it is not running (it must be enabled in the configuration)."""
        return self._submit(self._start(self._enabled(name)))

    def stop(self, name: str) -> concurrent.futures.Future[None]:
        return self._submit(self._stop(name))

    def restart(self, name: str) -> concurrent.futures.Future[None]:
        server = self._enabled(name)

        async def restart() -> None:
            await self._stop(name)
            await self._start(server)
        return self._submit(restart())

    def status(self, name: str) -> ServerStatus:
        with self._changed:
            return self._statuses.get(name, ServerStatus(name))

    def statuses(self) -> tuple[ServerStatus, ...]:
        with self._changed:
            return tuple(self._statuses.get(s.name, ServerStatus(s.name)) for s in self._config.servers)

    def wait_for(self, name: str, states: tuple[State, ...], timeout: float) -> ServerStatus:
        """The status of ``name`` once its state is one of ``states`` (or as it is after
        ``timeout`` seconds)."""
        with self._changed:
            self._changed.wait_for(lambda: self.status(name).state in states, timeout)
            return self.status(name)

    def add_listener(self, listener: Listener) -> None:
        with self._changed:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._changed:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def toolbox(self) -> Toolbox:
        """The enabled tools of the ready, enabled servers, named for a model."""
        with self._changed:
            config, statuses = self._config, dict(self._statuses)
        offered = []
        for server in config.servers:
            status = statuses.get(server.name)
            if server.enabled and status is not None and status.state == "ready":
                tools = [t for t in status.tools if t.name not in server.disabled_tools]
                offered.append((server.name, tools))
        return build_toolbox(offered)

    def call(self, server: str, tool: str, arguments: dict[str, Any] | None = None, *,
             cancel: threading.Event | None = None, timeout: float | None = None) -> ToolResult:
        """Call ``tool`` of ``server``; the result, or a one-line error result when it cannot
        be had: not running, disabled, no such tool, timed out, cancelled, crashed, refused."""
        timeout = self.limits.call_timeout if timeout is None else timeout
        if self._closed:
            return ToolResult.error("the tool host is closed")
        future = asyncio.run_coroutine_threadsafe(self._call(server, tool, arguments, timeout), self._loop)
        try:
            while True:
                try:
                    return future.result(timeout=None if cancel is None else CANCEL_POLL)
                except concurrent.futures.TimeoutError:
                    if cancel is not None and cancel.is_set():
                        future.cancel()
                        return ToolResult.error(f"{server}/{tool}: cancelled")
        except concurrent.futures.CancelledError:
            return ToolResult.error(f"{server}/{tool}: the tool host closed during the call")

    def close(self) -> None:
        """Stop every server and the loop's thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> ToolHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers of the synchronous side ---------------------------------------------------
    def _enabled(self, name: str) -> ServerConfig:
        with self._changed:
            server = self._config.get(name)
        if server is None:
            raise ToolConfigError(f"there is no server named {name!r}")
        if not server.enabled:
            raise ToolConfigError(f"server {name!r} is disabled")
        return server

    def _submit(self, coro: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        """Run a change of the running servers on the loop, one change at a time."""
        if self._closed:
            coro.close()
            raise RuntimeError("the tool host is closed")

        async def serially() -> None:
            async with self._serial:
                await coro
        return asyncio.run_coroutine_threadsafe(serially(), self._loop)

    def _publish(self, status: ServerStatus) -> None:
        with self._changed:
            if self._config.get(status.name) is None and status.state == "stopped":
                self._statuses.pop(status.name, None)
            else:
                self._statuses[status.name] = status
            self._changed.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(status)
            except Exception:
                log.exception("a tool host listener failed")

    # -- on the loop -----------------------------------------------------------------------
    async def _apply(self, config: McpConfig) -> None:
        stale = [name for name, run in self._runs.items()
                 if (s := config.get(name)) is None or not s.enabled or not s.same_endpoint(run.server)]
        await asyncio.gather(*(self._stop(name) for name in stale))
        with self._changed:
            gone = [name for name in self._statuses if config.get(name) is None]
        for name in gone:
            self._publish(ServerStatus(name))
        for server in config.servers:
            if server.enabled and server.name not in self._runs:
                await self._start(server)
            elif not server.enabled:
                self._publish(ServerStatus(server.name))

    async def _start(self, server: ServerConfig) -> None:
        if server.name in self._runs:
            return
        run = _Run(server)
        self._runs[server.name] = run
        self._publish(ServerStatus(server.name, "starting"))
        run.task = asyncio.create_task(self._hold(run), name=f"mcp:{server.name}")

    async def _stop(self, name: str) -> None:
        run = self._runs.get(name)
        if run is None:
            return
        run.stop.set()
        if run.client is None and run.task is not None:
            run.task.cancel()  # still starting: there is no connection to close politely
        if run.task is not None:
            await asyncio.gather(run.task, return_exceptions=True)
        if self._runs.get(name) is run:
            del self._runs[name]
        self._publish(ServerStatus(name))

    async def _hold(self, run: _Run) -> None:
        """Open the server, publish its tools, hold the connection until stopped or lost."""
        server = run.server
        log.info("starting MCP server %r (%s: %s)", server.name, server.transport, _shown(server))
        errlog_path = self.log_dir / f"{_file_name(server.name)}.log"
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            async with AsyncExitStack() as stack:
                errlog = stack.enter_context(open(errlog_path, "w", encoding="utf-8", errors="replace"))
                async with asyncio.timeout(self.limits.start_timeout):
                    client = await open_client(server, stack, errlog=errlog,
                                               max_sse_event_bytes=self.limits.max_sse_event_bytes)
                    tools = await list_tools(client)
                run.client, run.was_ready = client, True
                log.info("MCP server %r is ready with %d tools", server.name, len(tools))
                self._publish(ServerStatus(server.name, "ready", tools=tools))
                await run.stop.wait()
                run.client = None
        except asyncio.CancelledError:
            return  # stopped while starting; _stop publishes
        except Exception as e:  # the SDK's errors, OSError, timeouts: all end as one line
            reason = (run.lost or (f"the connection failed: {one_line(e, server.secrets)}" if run.was_ready
                                   else start_failure(e, server)))
            run.client = None
            self._fail(server, reason, errlog_path)
            return
        if run.lost:
            self._fail(server, run.lost, errlog_path)

    def _fail(self, server: ServerConfig, reason: str, errlog: Path) -> None:
        """Publish ``server`` as failed; a stdio server's last line on stderr is added."""
        if server.command:
            last = _last_line(errlog)
            if last:
                reason = f"{reason} — stderr: {redact(last, server.secrets)}"
        reason = reason if len(reason) <= 300 else reason[:299] + "…"
        log.warning("MCP server %r failed: %s", server.name, reason)
        self._publish(ServerStatus(server.name, "failed", reason))

    async def _call(self, server: str, tool: str, arguments: dict[str, Any] | None,
                    timeout: float) -> ToolResult:
        where = f"{server}/{tool}"
        with self._changed:
            config = self._config.get(server)
        run, status = self._runs.get(server), self.status(server)
        if config is None or not config.enabled:
            return ToolResult.error(f"{where}: the server {server!r} is not enabled")
        if run is None or run.client is None or status.state != "ready":
            why = f" ({status.reason})" if status.reason else ""
            return ToolResult.error(f"{where}: the server is {status.state}{why}")
        if tool in config.disabled_tools:
            return ToolResult.error(f"{where}: this tool is disabled")
        if not any(t.name == tool for t in status.tools):
            return ToolResult.error(f"{where}: the server has no such tool")
        if arguments is not None and not isinstance(arguments, dict):
            return ToolResult.error(f"{where}: the arguments must be a JSON object")
        try:
            async with asyncio.timeout(timeout):
                result = await run.client.call_tool(tool, arguments or {})
        except TimeoutError:
            return ToolResult.error(f"{where}: no answer within {timeout:g} s")
        except Exception as e:
            line = one_line(e, config.secrets)
            if isinstance(e, MCPError) and e.code == CONNECTION_CLOSED and not run.stop.is_set():
                run.lost = f"the connection closed during a call to {tool!r}"
                run.stop.set()
                return ToolResult.error(f"{where}: the server closed the connection (it has stopped)")
            return ToolResult.error(f"{where}: {line}")
        return tool_result(result, self.limits.result_chars)

    async def _close(self) -> None:
        async with self._serial:
            await asyncio.gather(*(self._stop(name) for name in list(self._runs)))
        calls = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in calls:
            task.cancel()
        await asyncio.gather(*calls, return_exceptions=True)


def _shown(server: ServerConfig) -> str:
    """What the log may say of how a server starts: its command, or its URL without the user,
    password, query or fragment (where tokens hide)."""
    if server.command:
        return server.command
    url = urlsplit(server.url)
    return urlunsplit((url.scheme, url.netloc.rpartition("@")[2], url.path, "", ""))


def _file_name(name: str) -> str:
    """A file name for a server's stderr log: readable, and distinct for distinct names."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _last_line(path: Path) -> str:
    """The last non-empty line of a server's stderr log ("" if none)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")
