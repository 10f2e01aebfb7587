"""The benchmarks' one process launcher (also used by the tests that start workers).

A child's output goes to a file (a temporary one unless a log path is given), so that a child
that fails to start can say why in one line; ``stop`` ends it politely, then for good. Servers
(``duet-cli serve``, llama-server) are ready when their /health says so, ``duet-cli worker``s
when they print that they listen.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from unittest import mock

from bench import client
from engine.errors import DuetError
from engine.llama.rpc_worker import READY

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """``cmd`` running with its output (stdout and stderr) in ``log_path``, or in a temporary
    file removed by ``stop``; ``python -m engine`` runs this repository's Duet, installed or
    not."""

    def __init__(self, cmd: Sequence[str], *, log_path: Path | None = None) -> None:
        self.command = list(cmd)
        self._own_log = log_path is None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="duet-bench-", suffix=".log")
            os.close(fd)
            log_path = Path(name)
        self.log_path = log_path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        with open(log_path, "wb") as out:  # the child keeps its own handle
            self.proc = subprocess.Popen(self.command, env=env, stdout=out,
                                         stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self, last: int | None = None) -> str:
        """What the process printed so far (its ``last`` bytes only, if given)."""
        try:
            with open(self.log_path, "rb") as f:
                if last is not None:
                    f.seek(max(0, f.seek(0, os.SEEK_END) - last))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def tail(self, n: int = 600) -> str:
        """The last ``n`` characters the process printed, on one line."""
        return " | ".join(self.output(n).strip().splitlines())

    def wait_until(self, ready: Callable[[], bool], what: str, timeout_s: float) -> None:
        """Return once ``ready()`` holds (checked every 0.1 s); DuetError when the process ends
        first (with the end of its output) or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            if self.proc.poll() is not None:
                raise DuetError(f"{what} exited with {self.proc.returncode}: {self.tail()}")
            if time.monotonic() > deadline:
                raise DuetError(f"{what} did not become ready in {timeout_s:g} s: {self.tail()}")
            time.sleep(0.1)

    def stop(self, timeout_s: float = 20) -> None:
        """End the process: SIGTERM, then SIGKILL after ``timeout_s`` (0: SIGKILL at once)."""
        if self.proc.poll() is None:
            if timeout_s > 0:
                self.proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=timeout_s)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        if self._own_log:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def empty_kv_store() -> Iterator[None]:
    """Duet processes started inside keep long prompts' states in an empty disk KV store
    (``DUET_KV_DIR``), removed after: a run reads nothing an earlier one kept, as llama-server."""
    with tempfile.TemporaryDirectory(prefix="duet-bench-kv-") as kv, \
            mock.patch.dict(os.environ, {"DUET_KV_DIR": kv}):
        yield


def start_server(cmd: Sequence[str], port: int, what: str, *, log_path: Path | None = None,
                 timeout_s: float = 600) -> Process:
    """A server started with ``cmd`` that answers /health on ``port``."""
    proc = Process(cmd, log_path=log_path)
    try:
        proc.wait_until(lambda: _healthy(port), what, timeout_s)
    except BaseException:
        proc.stop()
        raise
    return proc


def _healthy(port: int) -> bool:
    try:
        client.health(port, timeout=5)
    except client.Failed:
        return False
    return True


def start_worker(endpoint: str, *, threads: int = 1, extra: Sequence[str] = (),
                 prefix: Sequence[str] = (), timeout_s: float = 120) -> Process:
    """A ``duet-cli worker`` listening on ``endpoint``, started behind ``prefix`` (e.g.
    ``ip netns exec NAME``), once it says that it listens."""
    proc = Process([*prefix, sys.executable, "-m", "engine", "worker", "--listen", endpoint,
                    "--threads", str(threads), *extra])
    try:
        proc.wait_until(lambda: READY in proc.output(), f"worker {endpoint}", timeout_s)
    except BaseException:
        proc.stop()
        raise
    return proc


def rss_bytes(pid: int) -> int | None:
    """Resident memory of process ``pid`` (psutil when installed, else /proc); None if gone."""
    try:
        import psutil  # lazy and optional: /proc serves where it is missing
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None
