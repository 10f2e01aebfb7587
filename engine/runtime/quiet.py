"""The cores are shared by every model a process holds: one engine's idle work (measuring the
verify cost after a load, reading a prompt ahead) waits while another engine answers or a model
loads, and stops at once when that begins.

Each engine marks itself busy while it has a reply, a call or a waiting job (``mark``), and a
load holds ``busy()`` for its duration. ``calm(engine)`` says whether anything else is busy.
Becoming busy sets the other engines' ``preempt`` event, so an idle step under way stops (it
decodes with that event as its cancel); the last one to become idle again wakes the others.

Measured with ``python -m bench fleet``: a second model's first request after a cold start
waited on the first model's measurement, on the same two cores (docs/benchmarks/models.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Waker(Protocol):
    preempt: threading.Event

    def wake(self) -> None: ...


class Quiet:
    """Which engines (and loads) are busy now; shared by the engines of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: set[object] = set()
        self._engines: list[Waker] = []

    def join(self, engine: Waker) -> None:
        with self._lock:
            self._engines.append(engine)

    def leave(self, engine: Waker) -> None:
        """``engine`` is closing: it is neither busy nor woken any more."""
        with self._lock:
            self._engines = [e for e in self._engines if e is not engine]
        self.mark(engine, False)

    def calm(self, engine: object) -> bool:
        """Whether nothing but ``engine`` is busy."""
        with self._lock:
            return not (self._busy - {engine})

    def mark(self, who: object, busy: bool) -> None:
        with self._lock:
            if busy == (who in self._busy):
                return
            if busy:
                self._busy.add(who)
            else:
                self._busy.discard(who)
            others = [e for e in self._engines if e is not who]
            calm = not self._busy
        # (outside the lock: an engine's own lock is taken in wake, never the other way round)
        for e in others:
            if busy:
                e.preempt.set()  # an idle step under way stops
            elif calm:
                e.wake()

    @contextmanager
    def busy(self) -> Iterator[None]:
        """Busy for the block's duration (a model loading)."""
        token = object()
        self.mark(token, True)
        try:
            yield
        finally:
            self.mark(token, False)


PROCESS = Quiet()  # the engines of this process share its cores
