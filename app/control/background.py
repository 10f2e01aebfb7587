"""One long job of the library (an import, an export of everything) on a thread of its own, so
that the window never waits for it. QtCore only.

The job is a plain function ``job(report)``; ``report(x)`` passes a progress figure back and
raises ``Cancelled`` once ``cancel()`` was asked. Figures and the end come back to the GUI
thread as queued signals. Progress is coalesced without a clock: while a figure is on its way
to the GUI thread, newer ones replace it there, so a job reporting 10,000 times a second sends
only as many figures as the GUI thread takes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal

log = logging.getLogger(__name__)

Report = Callable[[object], None]
Notify = Callable[[str, str], None]  # (text, kind): a notice about no conversation in particular


class Cancelled(Exception):
    """Raised in the job by ``report`` once the job was cancelled."""


@dataclass(frozen=True)
class JobFailed:
    """What ``done`` carries when the job raised: one line."""

    line: str


@dataclass(frozen=True)
class JobCancelled:
    """What ``done`` carries when the job stopped at ``cancel()``."""


class Background(QObject):
    progress = Signal(object)  # the job's latest figure (on the GUI thread)
    done = Signal(object)  # the job's result, JobFailed or JobCancelled
    _figure = Signal()  # emitted on the job's thread, queued to this one's
    _ended = Signal(object)

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._latest: object = None
        self._sent = False  # a figure is on its way to the GUI thread
        self._figure.connect(self._deliver_figure, Qt.ConnectionType.QueuedConnection)
        self._ended.connect(self._deliver_end, Qt.ConnectionType.QueuedConnection)

    @property
    def busy(self) -> bool:
        return self._thread is not None

    def start(self, job: Callable[[Report], object]) -> bool:
        """Run ``job`` on a new thread; False (nothing started) while another one runs."""
        if self._thread is not None:
            return False
        self._cancel.clear()
        self._thread = threading.Thread(target=self._run, args=(job,), daemon=True,
                                        name=f"duet-{self.name}")
        self._thread.start()
        return True

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        """Cancel the job and wait for it (its last record ends; nothing done is lost)."""
        thread = self._thread
        if thread is not None:
            self._cancel.set()
            thread.join()

    def _report(self, figure: object) -> None:
        if self._cancel.is_set():
            raise Cancelled
        with self._lock:
            self._latest = figure
            if self._sent:
                return
            self._sent = True
        self._figure.emit()

    def _run(self, job: Callable[[Report], object]) -> None:
        result: object
        try:
            result = job(self._report)
        except Cancelled:
            result = JobCancelled()
        except Exception as e:  # the thread must end with an answer whatever happened
            log.exception("the %s failed", self.name)
            result = JobFailed(f"The {self.name} failed: {type(e).__name__}: {e}"[:300])
        self._ended.emit(result)

    def _deliver_figure(self) -> None:
        with self._lock:
            figure, self._sent = self._latest, False
        if self._thread is not None:
            self.progress.emit(figure)

    def _deliver_end(self, result: object) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        self.done.emit(result)


class LibraryJob(QObject):
    """What the window's import and export of everything share: a Background job named
    ``name`` over the conversations ``folder`` (None: the usual one), ``progress`` (share done
    from 0 to 1, a line) and ``finished`` (the job's report; None when it was cancelled or
    failed). A subclass says what its figures and its end mean (``_on_progress``,
    ``_on_done``)."""

    progress = Signal(float, str)
    finished = Signal(object)

    def __init__(self, name: str, notify: Notify, folder: Path | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.notify, self.folder = notify, folder
        self.job = Background(name, self)
        self.job.progress.connect(self._on_progress)
        self.job.done.connect(self._on_done)

    @property
    def busy(self) -> bool:
        return self.job.busy

    def cancel(self) -> None:
        self.job.cancel()

    def close(self) -> None:
        self.job.close()

    def _on_progress(self, figure: object) -> None:
        raise NotImplementedError

    def _on_done(self, result: object) -> None:
        raise NotImplementedError
