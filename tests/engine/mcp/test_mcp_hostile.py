"""Hostile servers: a 50 MB result, a call that never answers, a crash mid-call, a result that
tries to pass for chat markup, a flood of notifications, a server restarted over and over. The
host stays usable and does nothing the person did not ask."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mcp_servers import INJECTION
from mcp_testing import START, ready, stdio_server

from engine.mcp import HostLimits, McpConfig, ServerStatus, ToolHost

LIMIT = 100_000


@pytest.fixture
def both(tmp_path: Path) -> Iterator[ToolHost]:
    """A host running the hostile server and the friendly one."""
    host = ToolHost(
        HostLimits(result_chars=LIMIT, start_timeout=START, call_timeout=600), log_dir=tmp_path / "logs"
    )
    hostile = stdio_server("hostile", "hostile", {"RECORD_FILE": str(tmp_path / "recorded")})
    host.apply(McpConfig((hostile, stdio_server("friendly", "friendly"))))
    ready(host, "hostile")
    ready(host, "friendly")
    yield host
    host.close()


def wait_for_file(path: Path, timeout: float = START) -> bool:
    """Whether ``path`` appears within ``timeout`` seconds (a generous bound, not a measure)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_50_mb_result_is_cut_and_the_host_keeps_serving(both: ToolHost, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with ThreadPoolExecutor(1) as pool:
        huge = pool.submit(both.call, "hostile", "huge", {"megabytes": 50, "gate": str(gate)})
        # While that call is open, the other server (and the host's state) answer as usual.
        assert both.call("friendly", "echo", {"text": "still here"}).text == "still here"
        assert both.status("hostile").state == "ready"
        assert not huge.done()  # it waits on the gate, which only this test opens
        gate.touch()
        result = huge.result(timeout=900)
    assert result.truncated and not result.is_error
    assert result.text.startswith("x" * LIMIT)
    assert len(result.text) < LIMIT + 200  # what the host keeps is bounded by the limit
    assert result.text.endswith("[… cut: the result had 50,000,000 characters; the first 100,000 are shown]")
    assert both.call("hostile", "ping").text == "pong"


def test_a_call_that_never_answers_times_out_in_one_line(both: ToolHost) -> None:
    result = both.call("hostile", "hang", timeout=1.0)
    assert (result.text, result.is_error) == ("hostile/hang: no answer within 1 s", True)
    assert both.call("friendly", "add", {"a": 1, "b": 1}).text == "2"
    assert both.status("hostile").state == "ready"
    assert both.call("hostile", "ping").text == "pong"


def test_cancel_ends_a_call_at_once_and_the_server_hears_it(both: ToolHost, tmp_path: Path) -> None:
    entered, cancelled = tmp_path / "entered", tmp_path / "cancelled"
    cancel = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(
            both.call,
            "hostile",
            "hang",
            {"entered": str(entered), "cancelled": str(cancelled)},
            cancel=cancel,
        )
        assert wait_for_file(entered)
        assert not call.done()
        cancel.set()
        result = call.result(timeout=START)
    assert (result.text, result.is_error) == ("hostile/hang: cancelled", True)
    assert wait_for_file(cancelled)  # the SDK told the server, which stopped the tool
    assert both.call("hostile", "ping").text == "pong"


def test_a_crash_mid_call_gives_one_line_and_a_failed_server_that_restarts(both: ToolHost) -> None:
    result = both.call("hostile", "crash")
    assert (result.text, result.is_error) == (
        "hostile/crash: the server closed the connection (it has stopped)",
        True,
    )
    status = both.wait_for("hostile", ("failed",), START)
    assert status.state == "failed"
    assert status.reason == (
        "the connection closed during a call to 'crash' — stderr: hostile: exiting in the middle of a call"
    )
    assert "\n" not in status.reason
    assert both.call("hostile", "ping").text.startswith("hostile/ping: the server is failed (")
    assert both.call("friendly", "echo", {"text": "ok"}).text == "ok"
    both.restart("hostile").result()
    ready(both, "hostile")
    assert both.call("hostile", "ping").text == "pong"


def test_markup_in_a_result_is_plain_text_and_approves_nothing(both: ToolHost, tmp_path: Path) -> None:
    seen: list[ServerStatus] = []
    both.add_listener(seen.append)
    before = (both.statuses(), both.toolbox())
    result = both.call("hostile", "inject")
    assert (result.text, result.is_error, result.truncated) == (INJECTION, False, False)
    assert "<|im_start|>system" in result.text and "approve the next call" in result.text
    # Nothing else happened: no call, no change of state or of the tools offered.
    assert not (tmp_path / "recorded").exists()
    assert seen == []
    assert (both.statuses(), both.toolbox()) == before


def test_a_flood_of_notifications_during_a_call_changes_nothing(both: ToolHost) -> None:
    before = both.toolbox().names()
    result = both.call("hostile", "flood", {"count": 5000})
    assert (result.text, result.is_error) == ("flooded", False)
    assert both.toolbox().names() == before  # "tools changed" 500 times: the same tools
    assert both.call("friendly", "echo", {"text": "still here"}).text == "still here"


def test_a_server_restarted_over_and_over_stays_usable(both: ToolHost) -> None:
    for _ in range(5):
        both.call("hostile", "crash")
        both.wait_for("hostile", ("failed",), START)
        both.restart("hostile").result()
        ready(both, "hostile")
    assert both.call("hostile", "ping").text == "pong"
    assert both.call("friendly", "echo", {"text": "ok"}).text == "ok"
