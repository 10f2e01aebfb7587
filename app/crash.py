"""Exceptions nobody caught (a bug in a Qt slot, a thread's): logged with their traceback and
shown as one line in the window, never only printed.

PySide hands an exception raised in a slot to ``sys.excepthook`` and carries on; so does Python
for a thread (``threading.excepthook``). ``install`` replaces both for the app's lifetime.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from types import TracebackType

from PySide6.QtCore import QObject, Signal

log = logging.getLogger(__name__)

Hook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())[:200]
    return f"Something went wrong inside Duet ({type(error).__name__}{': ' + text if text else ''})" \
        "; the details are in the log. The window goes on working."


class CrashReporter(QObject):
    """``shown(line)`` for every uncaught exception, after it was logged; emitted from the
    thread it happened on, so connect it to a QObject's method (queued to the window)."""

    shown = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._previous: Hook | None = None
        self._previous_thread: Callable[[threading.ExceptHookArgs], object] | None = None

    def install(self) -> CrashReporter:
        self._previous, sys.excepthook = sys.excepthook, self.hook
        self._previous_thread, threading.excepthook = threading.excepthook, self._thread_hook
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            sys.excepthook = self._previous
            self._previous = None
        if self._previous_thread is not None:
            threading.excepthook = self._previous_thread
            self._previous_thread = None

    def hook(self, kind: type[BaseException], error: BaseException,
             tb: TracebackType | None) -> None:
        if issubclass(kind, KeyboardInterrupt) or not issubclass(kind, Exception):
            sys.__excepthook__(kind, error, tb)  # Ctrl+C in a terminal, SystemExit: as usual
            return
        try:
            log.error("uncaught exception", exc_info=(kind, error, tb))
            self.shown.emit(one_line(error))
        finally:
            # a hook installed before this one (a test harness) still hears of it
            if self._previous not in (None, sys.__excepthook__):
                self._previous(kind, error, tb)

    def _thread_hook(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None:
            return
        self.hook(args.exc_type, args.exc_value, args.exc_traceback)


def install(show: Callable[[str], None], parent: QObject) -> CrashReporter:
    """Log every uncaught exception and hand ``show`` (a QObject's method: the window's notice)
    one line about it. Returns the reporter (``uninstall`` puts the previous hooks back)."""
    reporter = CrashReporter(parent)
    reporter.shown.connect(show)
    return reporter.install()
