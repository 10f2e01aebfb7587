"""The window while it imports a large export (issue 73): the longest the GUI thread could not
run (the heartbeat of scripts/bench_gui.py, a 10 ms timer): idle for 5 s first (what the
machine alone does to it), while the import runs on its thread, and while the list takes the
new conversations at its end; and how long the import took.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_import_gui.py [--conversations 10000]
        [--kb 20] [--repeats 1]

The export is generated: ChatGPT's conversations.json, each conversation a question and answer
pairs of about ``--kb`` KB in all, with one regenerated answer (a branch). Target: gaps under
50 ms, as for every phase of bench_gui.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import bench_gui  # noqa: E402
from bench_gui import Heartbeat, wait_for  # noqa: E402

bench_gui.LONG_MS = 3_600_000  # a large import on a busy machine takes minutes
from PySide6.QtCore import QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

IDLE_MS = 5000  # the heartbeat of the idle window first: what the machine alone does to it
WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing "
         "matches near the old harbour ").split()


def conversation(i: int, kb: int) -> dict[str, Any]:
    n = 6
    text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(kb * 1024 // (6 * n)))
    mapping: dict[str, Any] = {"r": {"id": "r", "message": None, "parent": None, "children": ["m0"]}}
    for k in range(n):
        kids = [f"m{k + 1}"] if k + 1 < n else []
        if k == 2:
            kids.append("alt")
        mapping[f"m{k}"] = {"id": f"m{k}", "parent": "r" if k == 0 else f"m{k - 1}",
                            "children": kids, "message": {
                                "author": {"role": ("user", "assistant")[k % 2]},
                                "create_time": 1.6e9 + i * 100 + k,
                                "content": {"content_type": "text", "parts": [f"{i}/{k} {text}"]}}}
    mapping["alt"] = {"id": "alt", "parent": "m2", "children": [], "message": {
        "author": {"role": "user"}, "create_time": 1.6e9 + i * 100 + 9,
        "content": {"content_type": "text", "parts": [f"{i} again"]}}}
    return {"title": f"Chat {i:05}", "id": f"c{i}", "create_time": 1.6e9 + i * 100,
            "update_time": 1.6e9 + i * 100 + 5, "mapping": mapping, "current_node": f"m{n - 1}"}


def run(home: Path, export: Path) -> tuple[dict[str, float], float, int]:
    from app.control import heap
    from app.control.settings import Settings
    from app.views.main_window import MainWindow

    w = MainWindow(Settings(home / "settings.json"), autoload=False)
    w.show()
    heap.enable()  # as the application does (app.__main__.create_window)
    heap.settle()
    beat = Heartbeat()
    beat.start()
    beat.phase = "idle, before (the machine's own)"
    loop = QEventLoop()
    QTimer.singleShot(IDLE_MS, loop.quit)
    loop.exec()
    beat.phase = "import running"
    list_new = w.importing.list_new

    def listing(found: Any = None) -> int:
        beat.phase = "list takes them"
        return list_new(found)

    w.importing.list_new = listing  # type: ignore[method-assign]
    t = time.perf_counter()
    (report,) = wait_for(w.importing.finished, lambda: w.importing.start([export]))
    took = time.perf_counter() - t
    settle = QEventLoop()  # the tick after the list took them ends that phase's longest gap
    QTimer.singleShot(1000, settle.quit)
    settle.exec()
    beat.timer.stop()
    listed = w.sidebar.list.count()
    w.close()
    assert report is not None and report.n_failed == 0, report
    return beat.gaps, took, listed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conversations", type=int, default=10_000)
    p.add_argument("--kb", type=int, default=20)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    app = QApplication.instance() or QApplication([])  # noqa: F841
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "conversations.json"
        with open(export, "w", encoding="utf-8") as f:
            f.write("[")
            for i in range(args.conversations):
                f.write(("," if i else "") + json.dumps(conversation(i, args.kb)))
            f.write("]")
        size = export.stat().st_size
        for r in range(args.repeats):
            home = Path(tmp) / f"home{r}"
            os.environ["DUET_HOME"] = str(home)
            gaps, took, listed = run(home, export)
            for phase, gap in gaps.items():
                rows.setdefault(f"GUI-thread longest gap: {phase} (ms)", []).append(gap * 1000)
            rows.setdefault("import, start to listed (s)", []).append(took)
            rows.setdefault("conversations listed", []).append(listed)
    print(f"{args.conversations:,} conversations, {size / 1e6:.0f} MB, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, values in rows.items():
        print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f} | {max(values):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
