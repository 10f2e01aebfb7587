"""The benchmarks' launcher: a child that fails to start says why (its own output), stop()
ends one that keeps running, and a real worker is ready once it says that it listens."""

from __future__ import annotations

import sys

import pytest

from bench.process import Process, free_port, start_server, start_worker
from engine.errors import DuetError


def test_a_server_that_exits_at_once_reports_its_output() -> None:
    cmd = [sys.executable, "-c", "print('error: invalid argument: --bogus'); raise SystemExit(3)"]
    with pytest.raises(DuetError) as err:
        start_server(cmd, free_port(), "the server", timeout_s=120)
    assert "the server exited with 3" in str(err.value)
    assert "invalid argument: --bogus" in str(err.value)


def test_stop_ends_a_process_that_keeps_running_and_removes_its_output() -> None:
    proc = Process([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"])
    proc.wait_until(lambda: "up" in proc.output(), "the sleeper", timeout_s=120)
    proc.stop()
    assert proc.proc.returncode is not None and not proc.log_path.exists()


def test_a_kept_log_stays_and_a_worker_is_ready_when_it_listens(tmp_path) -> None:
    log = tmp_path / "w.log"
    endpoint = f"127.0.0.1:{free_port()}"
    with start_worker(endpoint, timeout_s=120) as worker:
        assert "listening on" in worker.output()
    proc = Process([sys.executable, "-c", "print('kept')"], log_path=log)
    proc.wait_until(lambda: proc.proc.poll() is not None, "the printer", timeout_s=120)
    proc.stop()
    assert log.read_text() == "kept\n"
