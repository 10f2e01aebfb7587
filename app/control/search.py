"""Searching the saved conversations off the GUI thread.

One worker thread owns the search index (engine.conversation.search_index) and runs, in order,
the queries and the index updates (a conversation saved, renamed, deleted) sent to it. Each
query gets a number: one that a newer query superseded before it started is skipped, and an
answer comes back to the GUI thread (a queued signal) and is passed on as ``found`` only if no
newer query was sent meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal

from engine.conversation.search_index import SearchIndex

log = logging.getLogger(__name__)


class ConversationSearch(QObject):
    found = Signal(str, object)  # the newest query, frozenset of its matching paths
    _answer = Signal(int, str, object)  # emitted on the worker thread, queued to this one's

    def __init__(self, index: SearchIndex | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._index = index or SearchIndex()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duet-search")
        self._lock = threading.Lock()
        self._latest = 0
        self._closed = False
        self._answer.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    @property
    def latest(self) -> int:
        """The number of the newest query."""
        with self._lock:
            return self._latest

    def search(self, query: str, files: Sequence[Path]) -> int:
        """Find the ``files`` whose name or text holds ``query``; returns the query's number."""
        with self._lock:
            self._latest += 1
            number = self._latest
        self._submit(self._run, number, query, tuple(files))
        return number

    def saved(self, path: Path) -> None:
        self._submit(self._index.update, Path(path))

    def renamed(self, old: Path, new: Path) -> None:
        self._submit(self._index.moved, Path(old), Path(new))

    def deleted(self, path: Path) -> None:
        self._submit(self._index.forget, Path(path))

    def close(self) -> None:
        """Finish the work sent so far and close the index (later requests are dropped)."""
        if not self._closed:
            self._submit(self._index.close)
            self._closed = True
            self._pool.shutdown(wait=True)

    def _submit(self, fn: Callable[..., None], *args: object) -> None:
        if not self._closed:
            self._pool.submit(fn, *args)

    def _run(self, number: int, query: str, files: tuple[Path, ...]) -> None:
        if number != self.latest:
            return  # a newer query came before this one started
        try:
            hits = frozenset(self._index.search(query, files))
        except Exception:  # the thread must survive anything; the view keeps its last answer
            log.exception("searching the conversations for %r failed", query)
            return
        self._answer.emit(number, query, hits)

    def _deliver(self, number: int, query: str, hits: frozenset[Path]) -> None:
        if number == self.latest:
            self.found.emit(query, hits)
