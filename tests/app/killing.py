"""Real processes ended by real signals during a reply, and what they left on disk: shared by
tests/app/test_killed.py and scripts/kill_soak.py.

A run has its own DUET_HOME (``home``). ``start_window`` runs tests/app/kill_child.py (the window
in a process of its own) and returns once the reply streams; ``start_cli`` does the same with
``duet-cli generate --session``. ``end`` sends the signal and waits; ``saved`` reads the file a
run left, checksums included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from engine import paths
from engine.conversation.session.format import read_session

ROOT = Path(__file__).parents[2]
MESSAGE = "Explain in detail how TCP congestion control works."
MODELS = paths.models_dir()  # the real models folder, resolved before DUET_HOME is changed
STREAM_TIMEOUT_S = 300.0  # a reply not streaming by then has failed


def child_env(home: Path) -> dict[str, str]:
    return {**os.environ, "DUET_HOME": str(home), "DUET_MODELS_DIR": str(MODELS),
            "QT_QPA_PLATFORM": "offscreen"}


def _streaming(proc: subprocess.Popen, home: Path, first: str = "") -> subprocess.Popen:
    """``proc`` once its standard output began with ``first`` (or any text); else (it ended,
    or STREAM_TIMEOUT_S passed) it is killed and this raises with the end of its standard
    error."""
    assert proc.stdout is not None
    deadline = threading.Timer(STREAM_TIMEOUT_S, proc.kill)
    deadline.start()
    try:
        got = proc.stdout.read(len(first) or 1)
    finally:
        deadline.cancel()
    if not got or (first and got != first):
        proc.kill()
        proc.wait()
        raise AssertionError(f"the reply never streamed: {stderr_of(home)[-3000:]}")
    return proc


def stderr_of(home: Path) -> str:
    path = home / "stderr.txt"
    return path.read_text(errors="replace") if path.exists() else ""


def start_window(home: Path, model: Path, message: str = MESSAGE) -> subprocess.Popen:
    """The window in its own process (autosave on), ``message`` sent, its reply streaming."""
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "settings.json").write_text(json.dumps({"version": 2, "values": {
        "target_model": str(model), "autosave": True, "max_tokens": 2000, "temperature": 0.0,
        "drafter": "none", "n_ctx": 4096}}))
    with open(home / "stderr.txt", "wb") as err:
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "app" / "kill_child.py"),
                                 message], cwd=ROOT, env=child_env(home), stdout=subprocess.PIPE,
                                stderr=err, text=True)
    return _streaming(proc, home, "STREAMING")


def cli_args(model: Path, session: Path, message: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "engine", "generate", "--model", str(model), "--session",
            str(session), "--temperature", "0", "--drafter", "none", "--ctx", "4096", *extra,
            message]


def start_cli(home: Path, model: Path, session: Path, message: str = MESSAGE) -> subprocess.Popen:
    """``duet-cli generate --session`` in its own process, its reply streaming."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(cli_args(model, session, message, "--max-tokens", "2000"),
                                cwd=ROOT, env=child_env(home), stdout=subprocess.PIPE, stderr=err,
                                text=True)
    return _streaming(proc, home)  # the reply's first text


def end(proc: subprocess.Popen, sig: int, timeout: float = 120) -> int:
    """Send ``sig`` and wait for the end; a process that does not end is killed (and this
    raises subprocess.TimeoutExpired)."""
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def saved(path: Path) -> list[str]:
    """The texts of the messages saved in ``path``; raises AssertionError when a section is
    damaged (every checksum is checked), SessionError when the file cannot be opened."""
    loaded = read_session(path)
    assert not loaded.problems, loaded.problems
    return [m.content for m in loaded.meta.messages]


def window_file(home: Path) -> Path:
    """The one conversation the window saved."""
    (path,) = (home / "data" / "conversations").glob("*.duet")
    return path
