"""Take the README's screenshots: the real main window, offscreen, with a real reply.

    python packaging/screenshot.py OUT.png [--target KEY|PATH] [--draft KEY|PATH] [--prompt TEXT]
        [--theme light|dark] [--max-tokens N]

Models are starter keys (target, draft, test) or GGUF paths. Settings, conversations and caches
go to a temporary DUET_HOME (the models folder stays the user's). Exit status 0, or 1 with one
line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

PROMPT = "Write a Python function that checks whether a string is a palindrome."
TIMEOUT_MS = 600_000


def wait_for(signal, timeout_ms: int = TIMEOUT_MS):  # noqa: ANN001, ANN201 - Qt signal
    """Run the event loop until ``signal`` fires; return its arguments."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop, got = QEventLoop(), []
    signal.connect(lambda *args: (got.append(args), loop.quit()))
    QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()
    if not got:
        raise TimeoutError(f"no {signal} within {timeout_ms / 1000:.0f} s")
    return got[0]


def settle(ms: int = 400) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def take(args: argparse.Namespace) -> None:
    from PySide6.QtWidgets import QApplication

    from app import theme
    from app.main_window import MainWindow
    from app.settings import Settings
    from engine.runtime import resolve_model

    qapp = QApplication.instance() or QApplication(["duet"])
    qapp.setApplicationName("Duet")
    settings = Settings(Path(os.environ["DUET_HOME"]) / "settings.json")
    settings.update({"theme": args.theme, "temperature": 0.0, "max_tokens": args.max_tokens,
                     "speculative": True, "autosave": False})
    theme.apply_theme(qapp, settings["theme"])
    window = MainWindow(settings, autoload=False)
    window.resize(1100, 720)
    window.show()
    window.load_models(resolve_model(args.target), resolve_model(args.draft) if args.draft else None)
    wait_for(window.model_loaded)
    window.controller.send(args.prompt)
    wait_for(window.controller.reply_finished)
    settle()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not window.grab().save(str(args.out)):
        raise OSError(f"cannot write {args.out}")
    window.close()
    settle(100)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--target", default="target")
    p.add_argument("--draft", default="draft")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--theme", choices=("light", "dark"), default="light")
    p.add_argument("--max-tokens", type=int, default=220)
    args = p.parse_args(argv)
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    with tempfile.TemporaryDirectory(prefix="duet-screenshot-") as home:
        from engine import paths

        os.environ.setdefault("DUET_MODELS_DIR", str(paths.models_dir()))
        os.environ["DUET_HOME"] = home
        try:
            take(args)
        except Exception as e:  # noqa: BLE001 - a tool: one line
            print(f"screenshot: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
