"""The MCP servers the person added: frozen dataclasses, kept in ``config_dir()/mcp.json``.

The file is ``{"version": 1, "servers": [{"name", "command", "args", "env"} or {"name", "url",
"headers"}, with "enabled" and "disabledTools"]}``, written atomically. A damaged file (not JSON,
or any entry of the wrong shape) gives an empty configuration and is kept aside as
``mcp.json.bad`` with nothing lost. Environment and header values are secrets: ``repr`` and the
log show them masked (``mask``), and only an export the person asks for writes them in full.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from engine import paths
from engine.errors import DuetError
from engine.localfile import read_json, write_json

log = logging.getLogger(__name__)

VERSION = 1
FILENAME = "mcp.json"
MAX_NAME = 64
Pairs = tuple[tuple[str, str], ...]
Transport = Literal["stdio", "http"]
_URL = re.compile(r"^https?://[^\s/]+", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token


class ToolConfigError(DuetError, ValueError):
    """A server definition or a servers file that cannot be used; the message is one line."""


def mask(value: str) -> str:
    """A secret as it may be shown: its first and last two characters when it is long enough
    for that to give nothing away (``ab…yz``), otherwise ``•••``."""
    return f"{value[:2]}…{value[-2:]}" if len(value) >= 12 else "•••"


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret of four characters or more replaced by its mask."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, mask(secret))
    return text


def pairs(mapping: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> Pairs:
    items = mapping.items() if isinstance(mapping, Mapping) else (mapping or ())
    return tuple((str(k), str(v)) for k, v in items)


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server: a command run without a shell (stdio) or a Streamable HTTP URL."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Pairs = field(default=(), repr=False)
    url: str = ""
    headers: Pairs = field(default=(), repr=False)
    enabled: bool = True
    disabled_tools: frozenset[str] = frozenset()
    allowed_tools: frozenset[str] = frozenset()  # the person said "Always allow" for these

    def __post_init__(self) -> None:
        check_server(self)

    @classmethod
    def stdio(cls, name: str, command: str, args: Iterable[str] = (),
              env: Mapping[str, str] | None = None, **kw: Any) -> ServerConfig:
        return cls(name, command=command, args=tuple(args), env=pairs(env), **kw)

    @classmethod
    def http(cls, name: str, url: str, headers: Mapping[str, str] | None = None,
             **kw: Any) -> ServerConfig:
        return cls(name, url=url, headers=pairs(headers), **kw)

    @property
    def transport(self) -> Transport:
        return "http" if self.url else "stdio"

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(v for _, v in self.env + self.headers)

    def launch(self) -> tuple[str, ...]:
        """What starts it: the command and its arguments, or the URL."""
        return (self.command, *self.args) if self.command else (self.url,)

    def same_endpoint(self, other: ServerConfig) -> bool:
        """Whether ``other`` runs the same thing, whatever its name, whether it is enabled and
        which of its tools are (a change of those needs no restart)."""
        def endpoint(s: ServerConfig) -> tuple[Any, ...]:
            return s.command, s.args, s.env, s.url, s.headers
        return endpoint(other) == endpoint(self)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={mask(v)}" for k, v in self.env + self.headers)
        return (f"ServerConfig(name={self.name!r}, launch={self.launch()!r}, enabled={self.enabled}, "
                f"secrets=[{shown}])")


def check_server(s: ServerConfig) -> None:
    """ToolConfigError (one line) unless ``s`` is a usable definition."""
    where = f"server {s.name!r}"
    if not isinstance(s.name, str) or not s.name.strip() or len(s.name) > MAX_NAME:
        raise ToolConfigError(f"a server needs a name of 1 to {MAX_NAME} characters")
    if s.name != s.name.strip() or any(c in s.name for c in "\r\n\t\0"):
        raise ToolConfigError(f"{where}: the name has leading or trailing spaces or control characters")
    if bool(s.command) == bool(s.url):
        raise ToolConfigError(f"{where}: give either a command or a URL")
    if s.url and not _URL.match(s.url):
        raise ToolConfigError(f"{where}: the URL must start with http:// or https://")
    if s.url and (s.args or s.env):
        raise ToolConfigError(f"{where}: arguments and environment belong to a command, not a URL")
    if s.command and s.headers:
        raise ToolConfigError(f"{where}: headers belong to a URL, not a command")
    for text in (s.command, s.url, *s.args, *(k + v for k, v in s.env + s.headers)):
        if "\0" in text:
            raise ToolConfigError(f"{where}: a NUL character is not allowed")
    for key, _ in s.env:
        if not _ENV_NAME.match(key):
            raise ToolConfigError(f"{where}: {key!r} is not an environment variable name")
    for key, value in s.headers:
        if not _HEADER_NAME.match(key):
            raise ToolConfigError(f"{where}: {key!r} is not an HTTP header name")
        if "\r" in value or "\n" in value:
            raise ToolConfigError(f"{where}: the value of header {key!r} has a line break")
    for keys, what in ((s.env, "environment variable"), (s.headers, "header")):
        names = [k.lower() if what == "header" else k for k, _ in keys]
        if len(set(names)) != len(names):
            raise ToolConfigError(f"{where}: an {what} is given twice")


@dataclass(frozen=True)
class McpConfig:
    """The servers in the order the person added them; names are unique."""

    servers: tuple[ServerConfig, ...] = ()

    def __post_init__(self) -> None:
        names = [s.name for s in self.servers]
        for name in names:
            if names.count(name) > 1:
                raise ToolConfigError(f"two servers are named {name!r}")

    def get(self, name: str) -> ServerConfig | None:
        return next((s for s in self.servers if s.name == name), None)

    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.servers)

    def put(self, server: ServerConfig, *, replacing: str | None = None) -> McpConfig:
        """With ``server`` in place of ``replacing`` (default: the one of the same name), or
        added at the end."""
        old = replacing or server.name
        if any(s.name == old for s in self.servers):
            return McpConfig(tuple(server if s.name == old else s for s in self.servers))
        return McpConfig((*self.servers, server))

    def without(self, name: str) -> McpConfig:
        return McpConfig(tuple(s for s in self.servers if s.name != name))

    def merged(self, incoming: Iterable[ServerConfig]) -> tuple[McpConfig, tuple[str, ...]]:
        """With ``incoming`` added: one already here with the same definition is skipped, a
        different one with a taken name gets ``-2``, ``-3``… Returns the names added."""
        config, added = self, []
        for server in incoming:
            if any(s.same_endpoint(server) for s in config.servers):
                continue
            name, n = server.name, 1
            while config.get(name) is not None:
                n += 1
                suffix = f"-{n}"
                name = server.name[:MAX_NAME - len(suffix)] + suffix
            config = config.put(replace(server, name=name))
            added.append(name)
        return config, tuple(added)


# -- the file ---------------------------------------------------------------------------------
def config_path() -> Path:
    return paths.config_dir() / FILENAME


def server_to_json(s: ServerConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"name": s.name}
    if s.command:
        out.update(command=s.command, args=list(s.args), env=dict(s.env))
    else:
        out.update(url=s.url, headers=dict(s.headers))
    out.update(enabled=s.enabled, disabledTools=sorted(s.disabled_tools))
    if s.allowed_tools:
        out["alwaysAllow"] = sorted(s.allowed_tools)
    return out


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolConfigError(f"{what} must be a list of strings")
    return value


def _string_map(value: Any, what: str) -> Pairs:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ToolConfigError(f"{what} must be an object of strings")
    return pairs(value)


def server_from_json(raw: Any) -> ServerConfig:
    """A server from its entry in mcp.json; ToolConfigError saying what is wrong."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ToolConfigError("a server entry has no name")
    name = raw["name"]
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ToolConfigError(f"server {name!r}: enabled must be true or false")
    disabled_tools = frozenset(_strings(raw.get("disabledTools", []), f"{name}: disabledTools"))
    allowed_tools = frozenset(_strings(raw.get("alwaysAllow", []), f"{name}: alwaysAllow"))
    for key in ("command", "url"):
        if key in raw and not isinstance(raw[key], str):
            raise ToolConfigError(f"server {name!r}: {key} must be a string")
    return ServerConfig(
        name, command=raw.get("command", ""), url=raw.get("url", ""),
        args=tuple(_strings(raw.get("args", []), f"{name}: args")),
        env=_string_map(raw.get("env", {}), f"{name}: env"),
        headers=_string_map(raw.get("headers", {}), f"{name}: headers"), enabled=enabled,
        disabled_tools=disabled_tools, allowed_tools=allowed_tools)


def config_from_json(data: Any) -> McpConfig:
    if not isinstance(data, dict) or not isinstance(data.get("servers"), list):
        raise ToolConfigError("it has no servers list")
    if data.get("version") != VERSION:
        raise ToolConfigError(f"it has version {data.get('version')!r}; this Duet reads {VERSION}")
    return McpConfig(tuple(server_from_json(s) for s in data["servers"]))


def load(path: Path | None = None) -> McpConfig:
    """The servers in ``path`` (default: config_dir()/mcp.json); none when it is missing or
    damaged (a damaged one is kept aside as ``mcp.json.bad``)."""
    data = read_json(path or config_path(), _check)
    return McpConfig() if data is None else config_from_json(data)


def _check(data: Any) -> None:
    config_from_json(data)


def save(config: McpConfig, path: Path | None = None) -> None:
    """Write atomically (OSError when it cannot be written)."""
    write_json(path or config_path(),
               {"version": VERSION, "servers": [server_to_json(s) for s in config.servers]},
               indent=2)
