"""Start Duet: ``python -m app [FILE.duet]`` (also the ``duet`` command).

A ``.duet`` path on the command line opens that conversation, which is what a file manager
does on double-click.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

log = logging.getLogger("app")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="duet", description="A desktop chat for local GGUF models.")
    p.add_argument("file", nargs="?", type=Path, help="a .duet conversation to open")
    p.add_argument("--no-autoload", action="store_true",
                   help="do not load the last used model at start")
    p.add_argument("--log-level", default="WARNING",
                   choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="log verbosity (stderr)")
    # Startup-time measurement (tests): quit as soon as the window is on screen.
    p.add_argument("--exit-after-show", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _install_file_open_handler(app, window) -> None:  # noqa: ANN001
    """macOS hands a double-clicked ``.duet`` to a running app as a QFileOpenEvent, not argv."""
    from PySide6.QtCore import QEvent, QObject

    class FileOpenFilter(QObject):
        def eventFilter(self, obj, event):  # noqa: ANN001, N802 - Qt's name
            if event.type() == QEvent.Type.FileOpen and event.file():
                window.controller.open_path(Path(event.file()))
                return True
            return False

    window._file_open_filter = FileOpenFilter(app)
    app.installEventFilter(window._file_open_filter)


def create_window(args: argparse.Namespace):  # noqa: ANN201 - app.main_window.MainWindow
    """The QApplication (created if needed) and the shown main window, FILE opened if given."""
    from PySide6.QtWidgets import QApplication

    from app import theme
    from app.main_window import MainWindow
    from app.settings import Settings

    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setApplicationName("Duet")
    app.setDesktopFileName("duet")
    settings = Settings()
    theme.apply_theme(app, settings["theme"])
    window = MainWindow(settings, autoload=not args.no_autoload)
    window.show()
    _install_file_open_handler(app, window)
    if args.file is not None:
        window.controller.open_path(args.file)
    return window


def run_gui(args: argparse.Namespace) -> int:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    window = create_window(args)
    app = QApplication.instance()
    if args.exit_after_show:
        QTimer.singleShot(0, window.close)
        QTimer.singleShot(0, app.quit)
    return app.exec()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--self-check" in argv:  # headless: nothing of the GUI is built
        from app.selfcheck import run_selfcheck

        return run_selfcheck(argv)
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_gui(args)


if __name__ == "__main__":
    sys.exit(main())
