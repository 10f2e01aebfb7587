"""A peer server that fails to start says why (its own output), and stop() tidies up."""

from __future__ import annotations

import sys

import pytest

from engine.bench.server import _free_port, _wait_ready, launch, output_tail, stop


def test_a_server_that_exits_at_once_reports_its_output():
    proc = launch([sys.executable, "-c", "print('error: invalid argument: --bogus'); raise SystemExit(3)"])
    try:
        with pytest.raises(RuntimeError) as err:
            _wait_ready(_free_port(), proc, timeout=120)
        assert "exited with 3" in str(err.value) and "invalid argument: --bogus" in str(err.value)
    finally:
        stop(proc)
    assert proc.output_file.closed and output_tail(proc) == ""


def test_stop_ends_a_server_that_keeps_running():
    proc = launch([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"])
    stop(proc)
    assert proc.returncode is not None
