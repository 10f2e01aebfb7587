"""Import and export of the mcpServers JSON of Claude Desktop, Cursor, LM Studio and Jan."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.mcp import ServerConfig, ToolConfigError
from engine.mcp.interchange import read_servers, servers_from_json, write_servers

CLAUDE_DESKTOP = {
    "mcpServers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
        },
        "github": {
            "command": "docker",
            "args": ["run", "-i", "--rm", "-e", "GITHUB_TOKEN", "ghcr.io/github/github-mcp"],
            "env": {"GITHUB_TOKEN": "ghp_0123456789abcdef"},
        },
        "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer abc.def.ghi"}},
    }
}


def test_import_reads_commands_urls_env_and_headers_and_starts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps(CLAUDE_DESKTOP))
    servers = read_servers(path)
    assert [s.name for s in servers] == ["filesystem", "github", "remote"]
    assert not any(s.enabled for s in servers)  # imported servers wait for the person
    assert servers[1] == ServerConfig.stdio(
        "github",
        "docker",
        ["run", "-i", "--rm", "-e", "GITHUB_TOKEN", "ghcr.io/github/github-mcp"],
        {"GITHUB_TOKEN": "ghp_0123456789abcdef"},
        enabled=False,
    )
    assert servers[2] == ServerConfig.http(
        "remote", "https://mcp.example.com/mcp", {"Authorization": "Bearer abc.def.ghi"}, enabled=False
    )


def test_export_then_import_gives_the_same_servers(tmp_path: Path) -> None:
    servers = servers_from_json(CLAUDE_DESKTOP)
    path = tmp_path / "out.json"
    write_servers(path, servers)
    assert json.loads(path.read_text()) == CLAUDE_DESKTOP  # secrets in full: the person asked
    assert read_servers(path, enabled=True) == servers


def test_other_spellings_are_read() -> None:
    vscode = {
        "servers": {
            "t": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"]},
            "w": {"type": "http", "url": "http://127.0.0.1:9000/mcp"},
        }
    }
    assert [s.transport for s in servers_from_json(vscode)] == ["stdio", "http"]
    cline = {"mcpServers": {"t": {"command": "uvx", "disabled": True}}}
    assert not servers_from_json(cline)[0].enabled


@pytest.mark.parametrize(
    "content, message",
    [
        (b"{", r"x\.json: it is not valid JSON \(.*\)"),
        (b"\xff", r"x\.json: it is not UTF-8 text"),
        (b"[1, 2]", "the file is not a JSON object"),
        (b'{"servers": []}', "the file has no 'mcpServers' object"),
        (b'{"other": {}}', "the file has no 'mcpServers' object"),
        (b'{"mcpServers": {"a": "npx"}}', r"mcpServers\.a must be an object"),
        (b'{"mcpServers": {"a": {}}}', r"mcpServers\.a has neither a 'command' nor a 'url'"),
        (
            b'{"mcpServers": {"a": {"command": ["npx"]}}}',
            r"mcpServers\.a: 'command' and 'url' must be strings",
        ),
        (
            b'{"mcpServers": {"a": {"command": "npx", "args": "-y x"}}}',
            r"mcpServers\.a: 'args' must be a list of strings",
        ),
        (
            b'{"mcpServers": {"a": {"command": "npx", "env": {"K": 1}}}}',
            r"mcpServers\.a: env\.K must be a string",
        ),
        (
            b'{"mcpServers": {"a": {"url": "https://x", "headers": []}}}',
            r"mcpServers\.a: 'headers' must be an object",
        ),
        (
            b'{"mcpServers": {"a": {"type": "sse", "url": "https://x/sse"}}}',
            r"mcpServers\.a is an SSE server; Duet connects over stdio or Streamable HTTP",
        ),
        (
            b'{"mcpServers": {"a": {"type": "grpc", "url": "https://x"}}}',
            r"mcpServers\.a: type 'grpc' is not stdio or http",
        ),
        (
            b'{"mcpServers": {"a": {"url": "x.example"}}}',
            r"mcpServers\.a: server 'a': the URL must start with http:// or https://",
        ),
        (
            b'{"mcpServers": {"": {"command": "npx"}}}',
            r"mcpServers\.: a server needs a name of 1 to 64 characters",
        ),
        (
            b'{"mcpServers": {"a": {"command": "npx", "disabled": "no"}}}',
            r"mcpServers\.a: 'disabled' must be true or false",
        ),
    ],
)
def test_a_malformed_file_is_refused_with_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content)
    with pytest.raises(ToolConfigError) as info:
        read_servers(path)
    assert re.fullmatch(message, str(info.value))


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    missing = re.escape("cannot read absent.json: No such file or directory")
    with pytest.raises(ToolConfigError, match=missing):
        read_servers(tmp_path / "absent.json")
