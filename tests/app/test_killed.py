"""Nothing sent is lost when the process ends during a reply: a real window in its own process,
ended by a real SIGKILL (no chance to save: the checkpoint written at send time, and the ones
written while the reply streams, are what is on disk) or SIGTERM (the reply so far is written
first, through the signal's wake-up descriptor). After each: the message is in the file, the
file opens and passes its checksums."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.session.format import read_session

ROOT = Path(__file__).parents[2]
MESSAGE = "Explain in detail how TCP congestion control works."


def _run_until_streaming(home: Path, smol_path: Path) -> subprocess.Popen:
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "settings.json").write_text(json.dumps({"version": 2, "values": {
        "target_model": str(smol_path), "autosave": True, "max_tokens": 2000, "temperature": 0.0,
        "drafter": "none", "n_ctx": 4096}}))
    env = {**os.environ, "DUET_HOME": str(home), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "app" / "kill_child.py"), MESSAGE],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "STREAMING" not in line:
        proc.kill()
        pytest.fail(f"the window never streamed: {proc.stderr.read()[-3000:] if proc.stderr else ''}")
    return proc


def _saved(home: Path) -> tuple[list[str], str]:
    (path,) = (home / "data" / "conversations").glob("*.duet")
    loaded = read_session(path)  # checks every section's checksum
    assert not loaded.problems
    texts = [m.content for m in loaded.meta.messages]
    return texts, texts[-1] if len(texts) > 1 else ""


def _ended(proc: subprocess.Popen, sig: int) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:  # it did not end: the test fails, and no process is left
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("run", range(3))
def test_sigkill_during_a_reply_loses_no_sent_message(tmp_path, smol_path, run):
    proc = _run_until_streaming(tmp_path, smol_path)
    _ended(proc, signal.SIGKILL)
    texts, _ = _saved(tmp_path)
    assert MESSAGE in texts


@pytest.mark.parametrize("run", range(2))
def test_sigterm_during_a_reply_writes_the_reply_so_far(tmp_path, smol_path, run):
    proc = _run_until_streaming(tmp_path, smol_path)
    assert _ended(proc, signal.SIGTERM) == 0
    texts, reply = _saved(tmp_path)
    assert MESSAGE in texts and reply  # the partial reply is there too
