"""The process's end, asked from outside (SIGTERM at a logout or shutdown, SIGINT, SIGHUP, the
desktop session's quit request): what is on screen is written first, then the app quits.

A Python signal handler runs only when the interpreter next gets control, which the Qt event
loop may not give it for a long while; so the handler does nothing but let Python write the
signal's number to a socket (``signal.set_wakeup_fd``), and a ``QSocketNotifier`` on the other
end wakes the event loop, which saves and quits on the GUI thread, where the conversations
live."""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QSocketNotifier
from PySide6.QtWidgets import QApplication

log = logging.getLogger(__name__)

SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP")
                if hasattr(signal, name))


class QuitOnSignal(QObject):
    """``save()`` then closing ``window`` without a question and quitting on SIGTERM, SIGINT
    or SIGHUP; ``save()`` at the session manager's commit-data request (it may quit the app
    itself afterwards)."""

    def __init__(self, app: QApplication, save: Callable[[], None], window: Any) -> None:
        super().__init__(app)
        self.app, self.save, self.window = app, save, window
        self._read, self._write = socket.socketpair()
        for s in (self._read, self._write):
            s.setblocking(False)
        signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        for sig in SIGNALS:
            signal.signal(sig, lambda *_: None)  # the wake-up byte does the work
        self._notifier = QSocketNotifier(self._read.fileno(), QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._woken)
        app.commitDataRequest.connect(lambda _manager: self._save())

    def _woken(self) -> None:
        try:
            got = self._read.recv(64)
        except OSError:
            return
        if not got:
            return
        log.info("signal %s: saving, then quitting", ", ".join(str(b) for b in got))
        self._save()
        self.window.ask_before_closing = False  # (a reply streams: nobody is there to answer)
        self.window.close()  # stops the engine's threads
        self.app.quit()

    def _save(self) -> None:
        try:
            self.save()
        except Exception:  # noqa: BLE001 - quitting must not fail on a save
            log.exception("saving before quitting failed")
