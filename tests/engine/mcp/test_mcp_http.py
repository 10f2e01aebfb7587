"""The tool host against a real MCP server over Streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import socket

from mcp_servers import serve_http
from mcp_testing import START, ready

from engine.mcp import McpConfig, ServerConfig, ToolHost


def test_lists_and_calls_tools_over_http_with_the_configured_headers(host: ToolHost) -> None:
    seen: list[dict[str, str]] = []
    with serve_http("friendly", record_headers=seen) as url:
        host.apply(
            McpConfig(
                (
                    ServerConfig.http(
                        "web", url, {"Authorization": "Bearer t0ken-for-tests", "X-Team": "duet"}
                    ),
                )
            )
        )
        status = ready(host, "web")
        assert {"echo", "add", "picture"} <= {t.name for t in status.tools}
        assert host.call("web", "add", {"a": 20, "b": 22}).text == "42"
        assert host.call("web", "echo", {"text": "über"}).text == "über"
        host.stop("web").result()
    assert seen and all(h.get("authorization") == "Bearer t0ken-for-tests" for h in seen)
    assert all(h.get("x-team") == "duet" for h in seen)
    assert host.status("web").state == "stopped"


def test_a_server_that_goes_away_gives_one_line(host: ToolHost) -> None:
    with serve_http("friendly") as url:
        host.apply(McpConfig((ServerConfig.http("web", url),)))
        ready(host, "web")
    result = host.call("web", "echo", {"text": "anyone?"}, timeout=START)
    assert result.is_error and "\n" not in result.text and result.text.startswith("web/echo: ")
    assert host.wait_for("web", ("failed",), START).state == "failed"


def test_nothing_listening_fails_with_one_line(host: ToolHost) -> None:
    with socket.socket() as s:  # a port that was free a moment ago, and nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    host.apply(McpConfig((ServerConfig.http("void", url),)))
    status = host.wait_for("void", ("failed", "ready"), START)
    assert (status.state, status.reason) == ("failed", f"cannot reach {url}: All connection attempts failed")
