"""Start Duet: ``python -m app [FILE.duet]`` (also the ``duet`` command).

A ``.duet`` path on the command line opens that conversation, which is what a file manager
does on double-click.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from engine import logsetup
from engine.llama import rescue

if TYPE_CHECKING:  # the GUI modules are imported when the GUI starts
    from PySide6.QtWidgets import QApplication

    from app.views.main_window import MainWindow


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="duet", description="A desktop chat for local GGUF models.")
    p.add_argument("file", nargs="?", type=Path, help="a .duet conversation to open")
    p.add_argument("--no-autoload", action="store_true",
                   help="do not load the last used model at start")
    p.add_argument("--log-level", default="WARNING",
                   choices=logsetup.LEVELS, help="log verbosity (stderr)")
    # Startup-time measurement (tests): quit as soon as the window is on screen.
    p.add_argument("--exit-after-show", action="store_true", help=argparse.SUPPRESS)
    # A relaunch after a lost RPC worker ended the last run (engine.llama.rescue): what happened, and
    # the conversation it saved.
    p.add_argument("--worker-lost", metavar="WHY", help=argparse.SUPPRESS)
    p.add_argument("--reopen", type=Path, metavar="FILE", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def relaunch_argv(args: argparse.Namespace, rescued: tuple[Path, str] | None,
                  why: str) -> list[str]:
    """The command that starts Duet again after a lost worker ended this run: the same options,
    the conversation ``rescued`` saved reopened, ``why`` shown with it."""
    exe = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "app"]
    argv = [*exe, "--log-level", args.log_level, "--worker-lost", why]
    if args.no_autoload:
        argv.append("--no-autoload")
    if rescued is not None:
        argv += ["--reopen", str(rescued[0])]
    return argv


def worker_lost_notice(why: str) -> str:
    return (f"Duet restarted: {why}, which llama.cpp cannot recover from in a running process. "
            "The reply is kept up to where it stopped; start the worker again and load the "
            "model to go on (the next reply processes the conversation again).")


def _install_file_open_handler(app: QApplication, window: MainWindow) -> None:
    """macOS hands a double-clicked ``.duet`` to a running app as a QFileOpenEvent, not argv."""
    # lazy: Qt, as in create_window
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtGui import QFileOpenEvent

    class FileOpenFilter(QObject):
        def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
            if isinstance(event, QFileOpenEvent) and event.file():
                window.controller.files.open_path(Path(event.file()))
                return True
            return False

    window.file_open_filter = handler = FileOpenFilter(app)
    app.installEventFilter(handler)


def create_window(args: argparse.Namespace) -> MainWindow:
    """The QApplication (created if needed) and the shown main window, FILE opened if given."""
    # lazy: Qt and the GUI modules (PySide6 ~0.1 s, app.views.main_window ~2.5 s with the engine) only
    # on the GUI path: not for --self-check, nor before app.qt_libs found Qt's system libraries
    from PySide6.QtWidgets import QApplication

    from app import crash
    from app.control.settings import Settings
    from app.views import theme
    from app.views.main_window import MainWindow

    app = cast(QApplication, QApplication.instance() or QApplication([sys.argv[0]]))
    app.setApplicationName("Duet")
    app.setDesktopFileName("duet")
    settings = Settings()
    theme.apply_theme(app, settings["theme"])
    window = MainWindow(settings, autoload=not args.no_autoload)
    # a bug in a slot: logged with its traceback, one line in the window (not only printed)
    window.crash = crash.install(window.notice.show_error, window)
    window.show()
    _install_file_open_handler(app, window)
    if args.file is not None:
        window.controller.files.open_path(args.file)
    if args.reopen is not None:
        window.controller.files.open_path(args.reopen, worker_lost_notice(args.worker_lost or
                                                                    "an RPC worker went away"))
    elif args.worker_lost:
        window.controller.state.tell(worker_lost_notice(args.worker_lost), "error")
    return window


def run_gui(args: argparse.Namespace) -> int:
    # lazy: Qt and the GUI modules, as in create_window
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.control import heap
    from app.signals import QuitOnSignal

    window = create_window(args)
    app = cast(QApplication, QApplication.instance())
    heap.enable()  # (not in create_window: tests make windows with it, and collect them)
    heap.settle()  # what the window made at its start stays out of every later collection
    # A worker lost mid-pass ends the process (engine.llama.rescue): the engine worker saves the
    # conversation, then Duet starts again with it.
    rescue.set_relaunch(lambda why: relaunch_argv(args, window.controller.client.worker.rescued,
                                                  why))
    # SIGTERM, SIGINT, SIGHUP and the session's quit: the streaming reply is written first
    quit_on_signal = QuitOnSignal(app, window.controller.checkpoint_all, window)  # noqa: F841 - held
    if args.exit_after_show:
        QTimer.singleShot(0, window.close)
        QTimer.singleShot(0, app.quit)
    return app.exec()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--self-check" in argv:  # headless: nothing of the GUI is built
        from app.selfcheck import run_selfcheck  # lazy: ~25 ms the GUI path does not need

        return run_selfcheck(argv)
    args = parse_args(argv)
    logsetup.configure(args.log_level, timestamps=True)
    from app.qt_libs import problem  # lazy: subprocess, shutil (~10 ms) that --self-check does not need

    missing = problem()  # Qt would abort with a misleading message: say what to install
    if missing:
        print(missing, file=sys.stderr)
        return 1
    return run_gui(args)


if __name__ == "__main__":
    sys.exit(main())
