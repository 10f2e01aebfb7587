"""Resident memory of the app alone and with its local server on, the same model (issue 26):
one engine, one model in memory, so the server should add little.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_memory.py [--write]

A fresh home, the default settings, the starter models (the 1.5B and its 0.5B draft). Alone: the
models loaded and one reply in the window. Then the local server is switched on (loopback), a
client gets a reply from it (the official ``openai`` client) and the window replies once more.
VmRSS of this process after each phase (the peak, VmHWM, too). Target: with the server
≤ 1.1× alone. ``--write`` puts the table in docs/benchmarks/memory.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEventLoop, QTimer, SignalInstance  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from engine import logsetup  # noqa: E402

LONG_MS = 600_000


def rss_mib() -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
                  if ":" in line)
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def wait(signal: SignalInstance, action: Callable[[], object]) -> tuple:
    loop, got = QEventLoop(), []

    def done(*args: object) -> None:
        got.extend(args)
        loop.quit()

    signal.connect(done)
    QTimer.singleShot(LONG_MS, loop.quit)
    action()
    loop.exec()
    signal.disconnect(done)
    if not got:
        raise SystemExit("bench_memory: timed out")
    return tuple(got)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="write docs/benchmarks/memory.md")
    args = p.parse_args()
    logsetup.configure()
    app = QApplication.instance() or QApplication([])  # noqa: F841
    from app.control.models import starter_pair

    starters = starter_pair()
    if starters is None:
        raise SystemExit("bench_memory: no starter models (duet-cli models fetch --group starter)")
    os.environ.setdefault("DUET_MODELS_DIR", str(starters[0].parent))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DUET_HOME"] = tmp
        from app.control.settings import Settings
        from app.views.main_window import MainWindow

        settings = Settings(Path(tmp) / "settings.json")
        settings.update({"temperature": 0.0, "max_tokens": 64})
        w = MainWindow(settings, autoload=False)
        w.show()
        rows = [("window shown, no model", *rss_mib())]
        wait(w.model_loaded, lambda: w.load_models(*starters))
        wait(w.controller.reply_finished, lambda: w.controller.send("Name three rivers."))
        alone = rss_mib()
        rows.append(("models loaded, one reply in the window", *alone))
        port = free_port()
        settings.update({"server_port": port})
        wait(w.local_server.started, lambda: settings.set("server_enabled", True))
        import openai

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
        reply = client.chat.completions.create(  # the server and the engine have threads of their own
            model=starters[0].stem, max_tokens=64, temperature=0,
            messages=[{"role": "user", "content": "Name three mountains."}])
        if not reply.choices[0].message.content:
            raise SystemExit("bench_memory: the server gave no reply")
        wait(w.controller.reply_finished, lambda: w.controller.send("Name three lakes."))
        served = rss_mib()
        rows.append(("server on: a client's reply, then the window's", *served))
        w.ask_to_quit = lambda why: True  # type: ignore[method-assign]
        w.close()
    lines = ["| phase | RSS MiB | peak MiB |", "|---|---:|---:|"]
    lines += [f"| {name} | {rss:.0f} | {peak:.0f} |" for name, rss, peak in rows]
    lines.append(f"\nWith the server / alone: {served[0] / alone[0]:.3f}× (target ≤ 1.1×).")
    table = "\n".join(lines)
    print(table)
    if args.write:
        (REPO / "docs" / "benchmarks" / "memory.md").write_text(
            "# Memory: the app with its local server\n\n"
            "`QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_memory.py --write`: a "
            "fresh home, default settings, the starter models (1.5B target, 0.5B draft); one "
            "process, VmRSS after each phase. The window and the server's clients share one "
            "engine (one copy of each model, one KV cache).\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
