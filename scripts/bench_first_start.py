"""The first start, measured: a fresh home (no settings, no measured verify cost) with the starter
models in the models folder, from the window shown to the first token of the first reply.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_first_start.py [--repeats 3]
        [--cold] [--write]

The person's part is instant here: "Use the starter models" is clicked as soon as the window is
shown and the message is sent at once (it waits for the load in the worker's queue). Times, from
the window shown: the models loaded; the first token on the GUI thread (what the person sees);
the end of the background measurement of the verify cost (speculative decoding on). ``--cold``
drops the page cache before each run (root only; the models then come from disk). Run it on a
quiet machine; ``--write`` puts the medians in docs/benchmarks/first_start.md. Target: first
token within 15 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEventLoop, QObject, QTimer, Slot  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from engine import logsetup  # noqa: E402

LONG_MS = 600_000
MESSAGE = "Write a Python function that reverses a string."


class Clock(QObject):
    """Lives on the GUI thread: the worker's signals reach it queued, as they reach the window."""

    def __init__(self, t0: float) -> None:
        super().__init__()
        self.t0 = t0
        self.marks: dict[str, float] = {}
        self.loop = QEventLoop()

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.perf_counter() - self.t0)
        if {"first token", "speculation on"} <= self.marks.keys():
            self.loop.quit()

    @Slot(object)
    def loaded(self, _info: object) -> None:
        self.mark("models loaded")

    @Slot(object)
    def tokens(self, _batch: object) -> None:
        self.mark("first token")

    @Slot(object)
    def progress(self, p: object) -> None:
        if getattr(p, "op", "") == "calibrate" and p.done == p.total:  # type: ignore[attr-defined]
            self.mark("speculation on")

    @Slot(object)
    def failed(self, failure: object) -> None:
        raise SystemExit(f"bench_first_start: {failure}")


def drop_page_cache() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def one_start(home: Path, cold: bool) -> dict[str, float]:
    from app.control.settings import Settings
    from app.views.main_window import MainWindow

    if cold:
        drop_page_cache()
    settings = Settings(home / "settings.json")  # the defaults: drafter auto
    w = MainWindow(settings, autoload=True)
    w.show()
    QApplication.processEvents()
    if w.stack.currentWidget() is not w.first_run or not w.first_run.use_button.isVisible():
        raise SystemExit("bench_first_start: the window did not offer the starter models")
    clock = Clock(time.perf_counter())
    worker = w.client.worker
    worker.loaded.connect(clock.loaded)
    worker.tokens.connect(clock.tokens)
    worker.progress.connect(clock.progress)
    worker.failed.connect(clock.failed)
    w.first_run.use_button.click()
    w.controller.send(MESSAGE)
    QTimer.singleShot(LONG_MS, clock.loop.quit)
    clock.loop.exec()
    w.ask_to_quit = lambda why: True  # type: ignore[method-assign]
    w.close()
    if len(clock.marks) < 3:
        raise SystemExit(f"bench_first_start: timed out ({clock.marks})")
    return clock.marks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cold", action="store_true", help="drop the page cache first (root)")
    p.add_argument("--write", action="store_true", help="write docs/benchmarks/first_start.md")
    args = p.parse_args()
    logsetup.configure()
    app = QApplication.instance() or QApplication([])  # noqa: F841
    from app.control.models import starter_pair

    if starter_pair() is None:  # before DUET_HOME points elsewhere
        raise SystemExit("bench_first_start: no starter models (duet-cli models fetch --group starter)")
    os.environ.setdefault("DUET_MODELS_DIR", str(starter_pair()[0].parent))  # type: ignore[index]
    rows: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["DUET_HOME"] = tmp
            for name, s in one_start(Path(tmp), args.cold).items():
                rows.setdefault(name, []).append(s)
    lines = ["| from the window shown to | median s | min | max |", "|---|---:|---:|---:|"]
    for name, values in rows.items():
        lines.append(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | "
                     f"{max(values):.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        cache = "cold page cache (dropped before each start)" if args.cold else "warm page cache"
        out = REPO / "docs" / "benchmarks" / "first_start.md"
        with out.open("a") as f:
            f.write(f"\n## {cache}\n\n`QT_QPA_PLATFORM=offscreen .venv/bin/python "
                    f"scripts/bench_first_start.py --repeats {args.repeats}"
                    f"{' --cold' if args.cold else ''} --write`, {os.cpu_count()} cores, "
                    f"medians of {args.repeats}.\n\n{table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
