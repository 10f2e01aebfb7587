"""The servers file: round trips, atomic writes, damaged files kept aside, validation."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from engine.mcp import McpConfig, ServerConfig, ToolConfigError
from engine.mcp.config import config_path, load, save

STDIO = ServerConfig.stdio(
    "files",
    "npx",
    ["-y", "@modelcontextprotocol/server-filesystem", "/tmp/a b"],
    {"TOKEN": "abc123secretvalue"},
    disabled_tools=frozenset({"write_file"}),
)
HTTP = ServerConfig.http("notes", "https://notes.example/mcp", {"Authorization": "Bearer xyz"}, enabled=False)


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    config = McpConfig((STDIO, HTTP))
    save(config, path)
    assert load(path) == config
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert [s["name"] for s in data["servers"]] == ["files", "notes"]
    assert not [p for p in tmp_path.iterdir() if p.name != "mcp.json"]  # no temporary file left


def test_the_default_place_is_the_config_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUET_HOME", str(tmp_path))
    assert config_path() == tmp_path / "config" / "mcp.json"
    assert load() == McpConfig()
    save(McpConfig((STDIO,)))
    assert load() == McpConfig((STDIO,))


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"version": 1}',
        b'{"version": 2, "servers": []}',
        b'{"version": 1, "servers": [{"name": "x"}]}',
        b'{"version": 1, "servers": [{"name": "x", "command": "a", "url": "http://b"}]}',
        b'{"version": 1, "servers": [{"name": "x", "command": "a", "args": "not a list"}]}',
        b'{"version": 1, "servers": [{"name": "x", "command": "a", "env": {"K": 1}}]}',
        b'{"version": 1, "servers": [{"name": "x", "command": "a"}, {"name": "x", "command": "b"}]}',
        b'{"version": 1, "servers": [{"name": "x", "url": "ftp://nope"}]}',
        b'{"version": 1, "servers": [{"name": "x", "command": "a", "enabled": "yes"}]}',
        b"[" * 100 + b"]" * 100,
    ],
)
def test_a_damaged_file_gives_no_servers_and_is_kept_aside(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(content)
    assert load(path) == McpConfig()
    assert not path.exists()
    assert (tmp_path / "mcp.json.bad").read_bytes() == content
    assert "mcp.json is damaged" in caplog.text


def test_a_missing_file_is_no_servers(tmp_path: Path) -> None:
    assert load(tmp_path / "absent.json") == McpConfig()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ServerConfig("", command="x"), "a server needs a name"),
        (lambda: ServerConfig(" x", command="x"), "leading or trailing spaces"),
        (lambda: ServerConfig("x"), "give either a command or a URL"),
        (lambda: ServerConfig("x", command="a", url="http://b"), "give either a command or a URL"),
        (lambda: ServerConfig.http("x", "localhost:8000"), "must start with http:// or https://"),
        (lambda: ServerConfig.stdio("x", "a", env={"BAD NAME": "v"}), "not an environment variable name"),
        (lambda: ServerConfig.http("x", "http://h", {"Bad Header": "v"}), "not an HTTP header name"),
        (lambda: ServerConfig.http("x", "http://h", {"X": "a\r\nInjected: 1"}), "has a line break"),
        (lambda: ServerConfig.stdio("x", "a", ["nul\0"]), "NUL"),
        (lambda: ServerConfig("x", command="a", headers=(("A", "b"),)), "headers belong to a URL"),
        (
            lambda: McpConfig((ServerConfig.stdio("x", "a"), ServerConfig.stdio("x", "b"))),
            "two servers are named",
        ),
    ],
)
def test_invalid_definitions_are_refused_with_one_line(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ToolConfigError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_put_without_and_merged() -> None:
    config = McpConfig((STDIO,)).put(HTTP)
    assert config.names() == ("files", "notes")
    renamed = ServerConfig.stdio("files2", "uvx", ["mcp-server-time"])
    assert config.put(renamed, replacing="files").names() == ("files2", "notes")
    assert config.without("files").names() == ("notes",)
    other = ServerConfig.stdio("files", "uvx", ["other"])
    merged, added = config.merged([STDIO, other, other])
    assert added == ("files-2",)  # the same definition again is skipped, a different one renamed
    assert merged.get("files-2") == ServerConfig.stdio("files-2", "uvx", ["other"])


def test_same_endpoint_ignores_enabled_and_tools() -> None:
    assert STDIO.same_endpoint(replace(STDIO, enabled=False, disabled_tools=frozenset()))
    assert not STDIO.same_endpoint(replace(STDIO, env=(("TOKEN", "other"),)))
