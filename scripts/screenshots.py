"""Render the main window, light and dark, with a short real conversation, for the README.

    .venv/bin/python scripts/screenshots.py [--model target] [--draft draft] [--out docs/screenshots]

Runs offscreen in a temporary DUET_HOME (your settings and conversations are not touched),
loads the models, sends one prompt, waits for the reply, then grabs the window in each theme.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
PROMPT = "Write a short Python function that checks whether a string is a palindrome, then explain it in one sentence."


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="target", help="GGUF path or starter key (default: target)")
    p.add_argument("--draft", default="draft", help="draft GGUF path or starter key ('' for none)")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--max-tokens", type=int, default=320)
    p.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    p.add_argument("--size", default="1200x800", help="window size, WIDTHxHEIGHT")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.path.insert(0, str(REPO))
    from engine import logsetup, paths
    from engine.runtime.runtime import resolve_model

    logsetup.configure(logging.INFO)

    os.environ.setdefault("DUET_MODELS_DIR", str(paths.models_dir()))  # before DUET_HOME moves
    target = resolve_model(args.model)
    draft = resolve_model(args.draft) if args.draft else None
    os.environ["DUET_HOME"] = tempfile.mkdtemp(prefix="duet-screens-")

    from PySide6.QtCore import QEventLoop, QTimer, SignalInstance
    from PySide6.QtWidgets import QApplication

    from app.control.settings import Settings
    from app.views import theme
    from app.views.main_window import MainWindow

    app = QApplication([sys.argv[0]])
    settings = Settings()
    settings.update({"temperature": 0.0, "max_tokens": args.max_tokens, "autosave": True,
                     "drafter": "auto", "highlight_draft": True,
                     "theme": "light"})
    theme.apply_theme(app, "light")
    window = MainWindow(settings, autoload=False)
    width, height = (int(x) for x in args.size.split("x"))
    window.resize(width, height)
    window.show()

    def wait_for(signal: SignalInstance, timeout_s: float = 900.0) -> object:
        got: list = []
        loop = QEventLoop()
        signal.connect(lambda *a: (got.append(a), loop.quit()))
        QTimer.singleShot(int(timeout_s * 1000), loop.quit)
        loop.exec()
        if not got:
            raise SystemExit(f"timed out after {timeout_s:.0f} s")
        return got[0]

    def settle(ms: int = 300) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    window.load_models(target, draft)
    wait_for(window.model_loaded)
    t = time.perf_counter()
    window.controller.send(args.prompt)
    wait_for(window.controller.conversation_saved)
    log.info("reply in %.1f s", time.perf_counter() - t)
    window.notice.hide()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in ("light", "dark"):
        settings.set("theme", name)
        settle()
        window.chat_view.verticalScrollBar().setValue(0)
        settle()
        path = args.out / f"{name}.png"
        if not window.grab().save(str(path)):
            raise SystemExit(f"could not write {path}")
        log.info("wrote %s", path)
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
