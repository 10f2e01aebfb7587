"""A tool host per test (closed after it), and one with the friendly server running."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_testing import START, ready, stdio_server

from engine.mcp import HostLimits, McpConfig, ToolHost


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
