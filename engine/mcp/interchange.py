"""The ``mcpServers`` JSON that Claude Desktop, Cursor, LM Studio and Jan read and write.

``{"mcpServers": {"name": {"command": "...", "args": [...], "env": {...}},
"other": {"url": "...", "headers": {...}}}}``; VS Code's ``{"servers": {...}}`` is read too. An
entry may say ``"type"``: ``stdio``, ``http`` or ``streamable-http`` (SSE-only servers are
refused), and ``"disabled": true``. A malformed file is refused whole with one line naming the
entry. Export writes environment and header values in full: only the person asks for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.localfile import MAX_BYTES, Damaged, decode, write_json
from engine.mcp.config import ServerConfig, ToolConfigError

HTTP_TYPES = ("http", "streamable-http", "streamableHttp", "streamable_http")
MAX_SERVERS = 500


def _strings(value: Any, where: str, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolConfigError(f"{where}: {what!r} must be a list of strings")
    return tuple(value)


def _string_map(value: Any, where: str, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ToolConfigError(f"{where}: {what!r} must be an object")
    for key, v in value.items():
        if not isinstance(v, str):
            raise ToolConfigError(f"{where}: {what}.{key} must be a string")
    return value


def entry_to_server(name: str, entry: Any, *, enabled: bool = True) -> ServerConfig:
    """One ``mcpServers`` entry; ToolConfigError (one line) when it is not usable."""
    where = f"mcpServers.{name}"
    if not isinstance(entry, dict):
        raise ToolConfigError(f"{where} must be an object")
    kind = entry.get("type", "")
    if kind == "sse":
        raise ToolConfigError(f"{where} is an SSE server; Duet connects over stdio or Streamable HTTP")
    if not isinstance(kind, str) or kind not in ("", "stdio", *HTTP_TYPES):
        raise ToolConfigError(f"{where}: type {kind!r} is not stdio or http")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise ToolConfigError(f"{where}: 'disabled' must be true or false")
    command, url = entry.get("command"), entry.get("url")
    if not isinstance(command or "", str) or not isinstance(url or "", str):
        raise ToolConfigError(f"{where}: 'command' and 'url' must be strings")
    if not command and not url:
        raise ToolConfigError(f"{where} has neither a 'command' nor a 'url'")
    on = enabled and not disabled
    try:
        if command:
            args = _strings(entry.get("args", []), where, "args")
            env = _string_map(entry.get("env", {}), where, "env")
            return ServerConfig.stdio(name, command, args, env, enabled=on)
        headers = _string_map(entry.get("headers", {}), where, "headers")
        return ServerConfig.http(name, str(url), headers, enabled=on)
    except ToolConfigError as e:
        raise e if str(e).startswith(where) else ToolConfigError(f"{where}: {e}") from None


def servers_from_json(data: Any, *, enabled: bool = True) -> tuple[ServerConfig, ...]:
    """The servers of a decoded ``mcpServers`` document, in file order."""
    if not isinstance(data, dict):
        raise ToolConfigError("the file is not a JSON object")
    key = "mcpServers" if "mcpServers" in data else "servers" if "servers" in data else None
    if key is None or not isinstance(data[key], dict):
        raise ToolConfigError("the file has no 'mcpServers' object")
    if len(data[key]) > MAX_SERVERS:
        raise ToolConfigError(f"the file lists {len(data[key])} servers (at most {MAX_SERVERS})")
    return tuple(entry_to_server(name, entry, enabled=enabled) for name, entry in data[key].items())


def read_servers(path: Path, *, enabled: bool = False) -> tuple[ServerConfig, ...]:
    """The servers listed in ``path``, disabled unless ``enabled`` (an import starts nothing
    until the person enables a server). ToolConfigError with one line when it is unusable."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ToolConfigError(f"cannot read {path.name}: {e.strerror or e}") from None
    try:
        data = decode(raw)
    except Damaged as e:
        raise ToolConfigError(f"{path.name}: {e}") from None
    return servers_from_json(data, enabled=enabled)


def server_to_entry(s: ServerConfig) -> dict[str, Any]:
    if s.command:
        entry: dict[str, Any] = {"command": s.command, "args": list(s.args)}
        if s.env:
            entry["env"] = dict(s.env)
        return entry
    entry = {"url": s.url}
    if s.headers:
        entry["headers"] = dict(s.headers)
    return entry


def servers_to_json(servers: Iterable[ServerConfig]) -> dict[str, Any]:
    return {"mcpServers": {s.name: server_to_entry(s) for s in servers}}


def write_servers(path: Path, servers: Iterable[ServerConfig]) -> None:
    """Export ``servers`` as ``mcpServers`` JSON, secrets in full (OSError if it cannot)."""
    write_json(Path(path), servers_to_json(servers), indent=2)
