"""Properties that keep the window responsive, which no load on the machine can break.

How long the GUI thread is blocked, start-up time and render cost are *speeds*: they are
measured by ``scripts/bench_gui.py`` (figures in docs/benchmarks/gui.md), never asserted here.
What is asserted is why they stay small: the GUI thread never calls into llama.cpp (loading,
replying, saving and reopening all run on the engine worker), and a streamed update rebuilds
only the tail of the reply, so its work does not grow with the reply's length.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from llama_cpp import llama_cpp as lib

from engine.runtime.runtime import STARTER_FILES
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def native_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every llama.cpp function the engine calls, as (function, thread name). The engine reaches
    llama.cpp only through ``llama_cpp.llama_cpp`` attributes (engine/llama/backend.py), looked up at
    call time, so wrapping them sees every call."""
    calls: list[tuple[str, str]] = []
    for name in dir(lib):
        fn = getattr(lib, name)
        if not name.startswith("llama_") or isinstance(fn, type) or not callable(fn):
            continue

        def spy(*args, _fn=fn, _name=name):
            calls.append((_name, threading.current_thread().name))
            return _fn(*args)

        monkeypatch.setattr(lib, name, spy)
    return calls


def test_gui_thread_never_calls_llama_cpp(qtbot, window, driver, settings, smol_path,
                                          native_calls) -> None:
    """Load, reply, autosave with the KV state, start another chat, reopen through the KV
    restore: llama.cpp runs on the worker thread only."""
    model = smol_path.parent / STARTER_FILES["draft"]  # Qwen2.5-Coder 0.5B, a real load
    settings.update({"autosave": True, "save_kv": True, "max_tokens": 48})
    driver.load(model)
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        reply = driver.send("Write a Python function that checks whether a number is prime.")
    assert reply.done.stats.n_tokens > 10
    path = saved.args[0].path
    first = window.controller.current
    window.controller.new()
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS):
        driver.send("Say hello.")
    # opened as a file it was not (the engine's cache still holds the one shown: that path
    # restores nothing from the file)
    window.controller.library.remove(first)
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS) as opened:
        window.controller.files.open_path(path)
    assert opened.args[0].restored_kv, opened.args[0].note
    gui = threading.main_thread().name
    used = {name for name, _ in native_calls}
    assert {"llama_decode", "llama_state_seq_set_data"} <= used  # the spy saw the engine work
    on_gui = sorted({name for name, thread in native_calls if thread == gui})
    assert on_gui == [], f"the GUI thread called llama.cpp: {on_gui}"


def test_streamed_updates_rebuild_only_the_tail(qtbot) -> None:
    """Streaming a 4,600-character reply in 40-character steps: each update rebuilds at most the
    last block (a paragraph or a code block) plus the new text, never the whole reply."""
    from app.control.conversation import Turn
    from app.views.markdown import split_blocks
    from app.views.message_widget import MessageWidget

    para = "Some **bold** prose with `code` and a [link](https://example.org). " * 6
    code = "```python\n" + "\n".join(f"def f{i}(x):\n    return x + {i}  # note"
                                      for i in range(20)) + "\n```"
    text = "\n\n".join([para, code] * 4)
    spans = [(i, i + 3) for i in range(0, len(text), 7)]  # a drafted token every other one
    longest_block = max(len(b.text) for b in split_blocks(text))
    turn = Turn("assistant", "", streaming=True)
    widget = MessageWidget(turn)
    qtbot.addWidget(widget)
    widget.resize(800, 600)
    widget.show()
    rebuilt = []
    for n in range(40, len(text) + 40, 40):
        turn.text = text[:n]
        turn.spans = [(a, min(b, n)) for a, b in spans if a < n]
        widget.refresh(highlight_draft=True)
        rebuilt.append(widget.renderer.rebuilt_chars)
    assert len(rebuilt) > 100 and len(text) > 4 * longest_block
    # Each update: the block that grew (and the one it may have closed), never the reply.
    assert max(rebuilt) <= 2 * longest_block + 40, max(rebuilt)
    assert sum(rebuilt) < len(rebuilt) * len(text) / 4  # far from re-rendering everything
    assert widget.body.toPlainText().count("def f19") == 4  # and the whole reply is there


def test_start_shows_the_window_and_exits(tmp_path: Path) -> None:
    """The packaged entry point starts, shows its window and exits cleanly (its speed is in
    scripts/bench_gui.py)."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "DUET_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "app", "--no-autoload", "--exit-after-show"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
