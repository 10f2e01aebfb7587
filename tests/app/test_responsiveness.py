"""Targets: the GUI thread never blocks for 50 ms; start to window shown within 1.5 s.

The heartbeat is a 10 ms QTimer on the GUI thread; each gap between two ticks is the longest
the thread could not run its event loop. It runs while a real model (Qwen2.5-Coder 0.5B, half
a gigabyte) loads, replies (tokens streamed into Markdown), the reply is autosaved with its KV
state, and the conversation is reopened through the engine's KV restore.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QTextDocument

from engine.runtime import STARTER_FILES

from app.render import render
from app.theme import LIGHT_COLORS

LONG_MS = 300_000
MAX_GAP_S = 0.050
REPO = Path(__file__).resolve().parents[2]


class Heartbeat:
    """Longest gap between ticks of a 10 ms timer, per phase; and the longest GC pause."""

    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)
        self.gaps: dict[str, float] = {}
        self.phase = "start"
        self._last = time.perf_counter()
        self.gc_pause = 0.0
        self._gc_t0 = 0.0

    def _gc(self, stage: str, info: dict) -> None:
        if stage == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self.gc_pause = max(self.gc_pause, time.perf_counter() - self._gc_t0)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.gaps[self.phase] = max(self.gaps.get(self.phase, 0.0), now - self._last)
        self._last = now

    def start(self) -> None:
        gc.callbacks.append(self._gc)
        self._last = time.perf_counter()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()
        gc.callbacks.remove(self._gc)


def test_gui_thread_heartbeat(qtbot, window, driver, settings, smol_path, record_property) -> None:  # noqa: ANN001
    model = smol_path.parent / STARTER_FILES["draft"]  # Qwen2.5-Coder 0.5B
    settings.update({"autosave": True, "save_kv": True, "max_tokens": 96})
    beat = Heartbeat()
    beat.start()
    beat.phase = "load"
    driver.load(model)
    beat.phase = "generate+save"
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        reply = driver.send("Write a Python function that checks whether a number is prime, in "
                            "a code block, then explain it in two sentences.")
    assert reply.done.stats.n_tokens > 20
    path = saved.args[0].path
    beat.phase = "other conversation"
    window.controller.new()
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS):
        driver.send("Say hello.")
    beat.phase = "reopen"
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS) as opened:
        window.controller.open_path(path)
    assert opened.args[0].restored_kv
    qtbot.wait(100)
    beat.stop()
    worst = max(beat.gaps.values())
    summary = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in beat.gaps.items())
    record_property("max_gui_gap_ms", round(worst * 1000, 1))
    print(f"\nGUI-thread max gap per phase: {summary}; longest GC pause "
          f"{beat.gc_pause * 1000:.1f} ms")
    assert worst < MAX_GAP_S, summary


def test_rendering_a_long_reply_is_fast(qtbot) -> None:  # noqa: ANN001
    """Each streamed update re-renders the changed tail of the reply (in a shown view, layout
    included): its worst case must stay well inside the 50 ms budget."""
    from app.chat_view import MessageWidget
    from app.conversation import Turn

    para = "Some **bold** prose with `code` and a [link](https://example.org). " * 6
    code = "```python\n" + "\n".join(f"def f{i}(x):\n    return x + {i}  # note"
                                      for i in range(20)) + "\n```"
    text = "\n\n".join([para, code] * 4)  # about 4,600 characters
    spans = [(i, i + 3) for i in range(0, len(text), 7)]  # a drafted token every other one
    turn = Turn("assistant", "", streaming=True)
    widget = MessageWidget(turn)
    qtbot.addWidget(widget)
    widget.resize(800, 600)
    widget.show()
    worst = 0.0
    for n in range(40, len(text) + 40, 40):  # ~115 updates of 40 characters
        turn.text = text[:n]
        turn.spans = [(a, min(b, n)) for a, b in spans if a < n]
        t = time.perf_counter()
        widget.refresh(highlight_draft=True)
        widget.body.document().documentLayout().documentSize()  # force the layout
        worst = max(worst, time.perf_counter() - t)
    t = time.perf_counter()
    render(QTextDocument(), text, LIGHT_COLORS, spans=spans)
    full = time.perf_counter() - t
    print(f"\nstreamed update of a {len(text)}-character reply: worst {worst * 1000:.1f} ms; "
          f"full render {full * 1000:.1f} ms")
    assert worst < MAX_GAP_S


def test_start_to_window_shown(tmp_path: Path, record_property) -> None:  # noqa: ANN001
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "DUET_HOME": str(tmp_path)}
    times = []
    for _ in range(3):
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "app", "--no-autoload", "--exit-after-show"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        times.append(time.perf_counter() - t)
        assert proc.returncode == 0, proc.stderr[-2000:]
    best = min(times)
    record_property("start_to_shown_s", round(best, 2))
    print(f"\nstart to window shown (process start to exit after show): "
          f"{', '.join(f'{x:.2f}' for x in times)} s")
    assert best <= 1.5
