"""Environment and header values are secrets: never in the log, never shown in full."""

from __future__ import annotations

import logging
import sys

import pytest
from mcp_servers import serve_http
from mcp_testing import START, ready, stdio_server

from engine.mcp import McpConfig, ServerConfig, ToolHost, mask
from engine.mcp.config import redact

TOKEN = "sk-live-0123456789abcdef"
HEADER = "Bearer hdr-9876543210fedcba"


def test_mask_shows_at_most_four_characters() -> None:
    assert mask(TOKEN) == "sk…ef"
    assert mask("short") == "•••"
    assert mask("") == "•••"
    assert redact(f"key={TOKEN}; again {TOKEN}", [TOKEN, ""]) == "key=sk…ef; again sk…ef"


def test_repr_of_a_server_masks_its_values() -> None:
    stdio = ServerConfig.stdio("s", "cmd", ["--flag"], {"API_KEY": TOKEN})
    http = ServerConfig.http("h", "https://example.test/mcp", {"Authorization": HEADER})
    text = repr(McpConfig((stdio, http)))
    assert TOKEN not in text and HEADER not in text
    assert "API_KEY=sk…ef" in text and "Authorization=Be…ba" in text


def test_the_log_never_holds_an_environment_or_header_value(
    host: ToolHost, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    leaky = ServerConfig.stdio(  # a server that prints its token and dies: the reason masks it
        "leaky",
        sys.executable,
        ["-c", "import os, sys; sys.stderr.write('bad key ' + os.environ['API_KEY']); sys.exit(1)"],
        {"API_KEY": TOKEN},
    )
    with serve_http("friendly") as url:
        config = McpConfig(
            (
                stdio_server("ok", "friendly", {"API_KEY": TOKEN}),
                leaky,
                ServerConfig.http("web", url, {"Authorization": HEADER}),
            )
        )
        host.apply(config)
        ready(host, "ok")
        ready(host, "web")
        failed = host.wait_for("leaky", ("failed",), START)
        assert host.call("ok", "echo", {"text": "hi"}).text == "hi"
        assert host.call("web", "echo", {"text": "hi"}).text == "hi"
        host.apply(McpConfig()).result()
    assert failed.reason == "it closed the connection during start-up — stderr: bad key sk…ef"
    assert "starting MCP server 'ok'" in caplog.text  # the log was captured
    assert TOKEN not in caplog.text
    assert HEADER.split()[1] not in caplog.text
