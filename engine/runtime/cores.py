"""Who decodes when, for the models of one pool (engine.runtime.pool), which share the cores.

The rule, in full:

- **Replies decode at once.** Each loaded model has its own engine thread, which decodes every
  active reply of that model in one batch per step, with its configured ``n_threads``; two
  models with replies decode side by side. On the 2-core CPU that pays: the 1.5B and the 0.5B
  answering two clients at once took 0.74x the time of one after the other (each waits on
  memory part of the time; ``python -m bench fleet --together``).
- **Idle work waits.** A model's idle work (measuring the verify cost after a load, reading a
  prompt ahead, its template's opening) runs only while no other model of the pool has a reply,
  a call or a waiting job, and while no model loads. It is the lowest priority: it takes the
  cores only when nothing anybody waits for needs them.
- **Arrivals stop idle work at once.** When a model becomes busy, every other model's
  ``preempt`` event is set: an idle step under way decodes with it as its cancel and stops; the
  last one to become idle again wakes the others.

Each engine marks itself busy or idle (``mark``) as its work comes and goes; a load holds
``busy()`` for its duration. An engine outside any pool (a test, ``duet-cli generate``) has
``Cores`` of its own, where the rule says nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Waker(Protocol):
    preempt: threading.Event

    def wake(self) -> None: ...


class Cores:
    """Which engines (and loads) of one pool are busy now (see the module's docstring)."""

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
        """Whether ``engine`` may do idle work: nothing but itself is busy."""
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
