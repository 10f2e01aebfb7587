"""How responsive the window is, measured (the tests assert only properties that load cannot
break; these are the speeds, which a busy machine does change).

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_gui.py [--repeats 3] [--write]

- GUI-thread gaps: a 10 ms timer on the GUI thread; the longest gap between two ticks is the
  longest the event loop could not run, per phase (load the 0.5B model, reply + autosave with
  the KV state, another chat, reopen through the KV restore). Target: under 50 ms.
- Streamed render: the worst single update while a 4,600-character reply streams in 40-character
  steps (layout included), against a full render of the same text. Target: under 50 ms.
- Start to window shown: process start to exit after the window is shown. Target: 1.5 s.
- Model fingerprint: hashing a sparse 1 GiB file (head, tail, size). Target: 0.2 s.

Run it on a quiet machine; ``--write`` puts the medians in docs/benchmarks/gui.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEventLoop, Qt, QTimer, SignalInstance  # noqa: E402
from PySide6.QtGui import QTextDocument  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from engine import logsetup  # noqa: E402

LONG_MS = 300_000


class Heartbeat:
    """Longest gap between ticks of a 10 ms timer, per phase."""

    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)
        self.gaps: dict[str, float] = {}
        self.phase = "start"
        self._last = time.perf_counter()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.gaps[self.phase] = max(self.gaps.get(self.phase, 0.0), now - self._last)
        self._last = now

    def start(self) -> None:
        self._last = time.perf_counter()
        self.timer.start()


def wait_for(signal: SignalInstance, action: Callable[[], object]) -> tuple:
    """Run ``action`` and wait for ``signal``; its arguments."""
    loop = QEventLoop()
    got: list = []

    def done(*args: object) -> None:
        got.extend(args)
        loop.quit()

    signal.connect(done)
    QTimer.singleShot(LONG_MS, loop.quit)
    action()
    loop.exec()
    signal.disconnect(done)
    if not got:
        raise SystemExit("bench_gui: timed out waiting for the window")
    return tuple(got)


def gui_gaps(home: Path, model: Path) -> dict[str, float]:
    from app.control.settings import Settings
    from app.views.main_window import MainWindow

    settings = Settings(home / "settings.json")
    settings.update({"temperature": 0.0, "max_tokens": 96, "drafter": "none",
                     "autosave": True, "save_kv": True, "n_ctx": 2048})
    w = MainWindow(settings, autoload=False)
    w.show()
    beat = Heartbeat()
    beat.start()
    beat.phase = "load"
    wait_for(w.model_loaded, lambda: w.load_models(model, None))
    beat.phase = "reply + save"
    (saved,) = wait_for(w.controller.conversation_saved, lambda: w.controller.send(
        "Write a Python function that checks whether a number is prime, in a code block, "
        "then explain it in two sentences."))
    beat.phase = "another chat"
    w.controller.new()
    wait_for(w.controller.conversation_saved, lambda: w.controller.send("Say hello."))
    beat.phase = "reopen"
    wait_for(w.controller.conversation_opened, lambda: w.controller.files.open_path(saved.path))
    beat.timer.stop()
    w.close()
    return beat.gaps


def render_cost() -> tuple[float, float]:
    from app.control.conversation import Turn
    from app.views.message_widget import MessageWidget
    from app.views.render import render
    from app.views.theme import LIGHT_COLORS

    para = "Some **bold** prose with `code` and a [link](https://example.org). " * 6
    code = "```python\n" + "\n".join(f"def f{i}(x):\n    return x + {i}  # note"
                                      for i in range(20)) + "\n```"
    text = "\n\n".join([para, code] * 4)
    spans = [(i, i + 3) for i in range(0, len(text), 7)]
    turn = Turn("assistant", "", streaming=True)
    widget = MessageWidget(turn)
    widget.resize(800, 600)
    widget.show()
    worst = 0.0
    for n in range(40, len(text) + 40, 40):
        turn.text = text[:n]
        turn.spans = [(a, min(b, n)) for a, b in spans if a < n]
        t = time.perf_counter()
        widget.refresh(highlight_draft=True)
        widget.body.document().documentLayout().documentSize()
        worst = max(worst, time.perf_counter() - t)
    t = time.perf_counter()
    render(QTextDocument(), text, LIGHT_COLORS, spans=spans)
    return worst, time.perf_counter() - t


def start_to_shown(home: Path) -> float:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "DUET_HOME": str(home)}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "app", "--no-autoload", "--exit-after-show"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode:
        raise SystemExit(f"bench_gui: the app did not start: {proc.stderr[-500:]}")
    return time.perf_counter() - t


def fingerprint_s(folder: Path) -> float:
    from engine.conversation.session.fingerprint import file_fingerprint

    path = folder / "big.gguf"
    with open(path, "wb") as f:
        f.truncate(1 << 30)
        f.write(os.urandom(8 << 20))
        f.seek((1 << 30) - (8 << 20))
        f.write(os.urandom(8 << 20))
    t = time.perf_counter()
    file_fingerprint(path)
    return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--write", action="store_true", help="write docs/benchmarks/gui.md")
    args = p.parse_args()
    logsetup.configure()
    app = QApplication.instance() or QApplication([])  # noqa: F841
    from engine import paths
    from engine.runtime.runtime import STARTER_FILES

    model = paths.models_dir() / STARTER_FILES["draft"]  # before DUET_HOME points elsewhere
    if not model.exists():
        raise SystemExit(f"bench_gui: {model} is missing (duet-cli models fetch --group starter)")
    rows: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            os.environ["DUET_HOME"] = str(home)
            gc.collect()
            for phase, gap in gui_gaps(home, model).items():
                rows.setdefault(f"GUI-thread longest gap: {phase}", []).append(gap * 1000)
            worst, full = render_cost()
            rows.setdefault("streamed update, worst (4,600 chars)", []).append(worst * 1000)
            rows.setdefault("full render of the same reply", []).append(full * 1000)
            rows.setdefault("start to window shown", []).append(start_to_shown(home) * 1000)
            rows.setdefault("fingerprint of a 1 GiB model", []).append(fingerprint_s(home) * 1000)
    lines = ["| what | median ms | min | max |", "|---|---:|---:|---:|"]
    for name, values in rows.items():
        lines.append(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f} | "
                     f"{max(values):.1f} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        out = REPO / "docs" / "benchmarks" / "gui.md"
        out.write_text(
            "# GUI responsiveness\n\n"
            f"`QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_gui.py --repeats "
            f"{args.repeats} --write`, {os.cpu_count()} cores, medians of {args.repeats}. "
            "Targets: GUI-thread gaps and a streamed update under 50 ms, start to window "
            "shown 1.5 s, fingerprint 0.2 s. The tests assert the properties behind these "
            "figures (tests/app/test_responsiveness.py), never the times.\n\n" + table + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
