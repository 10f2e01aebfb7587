"""The engine service: one thread owns a runtime's contexts; everyone else sends jobs and calls.

The HTTP server's handlers, the app's chat and its local server all ``submit`` jobs
(engine.decode.scheduler.Job) and receive their events through the job's ``emit`` (thread-safe on their side);
the thread drives the runtime's one scheduler (``Runtime.hand_over``), which decodes every
active reply in one batch per step. A full queue refuses at once
(QueueFull: the server answers 429). ``call`` runs a function on the engine thread between two
steps (the app saves and opens conversations, and loads models, that way), so nothing else ever
touches llama.cpp. A job whose ``cancel`` is set ends within one step, or is skipped if not
started; an unexpected error fails the jobs it hit and the thread goes on. Other threads read
the engine's figures (``stats``, ``busy``, ``queued``) from a snapshot the thread publishes
after each step and as each job ends, never from the scheduler or the cache themselves.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from engine.decode.scheduler import Job
from engine.errors import DuetError
from engine.events import Done, Stats
from engine.llama.abort import Cancel
from engine.runtime.cores import Cores
from engine.runtime.runtime import Runtime

__all__ = ["Engine", "Job", "QueueFull"]

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The engine's queue is at its bound."""


@dataclass
class EngineCounters:
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    rejected: int = 0


class Engine:
    """Runs jobs on ``runtime`` (which it owns from now on) in one daemon thread.

    ``max_queue``: jobs that may wait for a slot before ``submit`` refuses. ``reserved``: the
    first sequences run only jobs pinned to them (the app's own chat). ``gate``: when given,
    the thread waits for it before each round (tests hold the engine with it). ``cores``: who
    decodes when among the engines of one pool (engine.runtime.cores: idle work waits while
    another is busy); None: the engine's own (it shares its cores with no other)."""

    def __init__(self, runtime: Runtime, *, max_queue: int = 8, reserved: int = 0,
                 gate: threading.Event | None = None, cores: Cores | None = None) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be >= 1")
        self.runtime = runtime
        self.cache = runtime.cache
        self.max_queue = max_queue
        self.counters = EngineCounters()
        self.scheduler = runtime.hand_over(reserved=reserved, on_finished=self._finished)
        self._pending: deque[Job] = deque()
        self._calls: deque[tuple[Callable[[], Any], Future]] = deque()
        self._changed = threading.Condition()
        self._closing = False
        self._gate = gate
        self._idle: deque[Callable[[], bool]] = deque()
        # set when a job or a call arrives: idle work passes it to llama.cpp as its cancel, so
        # that a step under way stops at once (its tokens are dropped) and the newcomer runs
        self.preempt: threading.Event = Cancel()
        self._spared: Callable[[Job], bool] | None = None  # see spare()
        self._snapshot: dict = {}
        self._publish()
        self.cores = cores if cores is not None else Cores()
        self.cores.join(self)
        self._thread = threading.Thread(target=self._loop, name="duet-engine", daemon=True)
        self._thread.start()

    # -- the clients' side ----------------------------------------------------------------
    def submit(self, job: Job) -> None:
        with self._changed:
            if self._closing or self.queued >= self.max_queue:
                self.counters.rejected += 1
                raise QueueFull
            self._pending.append(job)
            if self._spared is None or not self._spared(job):
                self.preempt.set()
            self._changed.notify_all()

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn()`` on the engine thread between two steps; its result (or exception)
        comes back in the future."""
        future: Future = Future()
        with self._changed:
            if self._closing:
                future.set_exception(DuetError("the engine has stopped"))
                return future
            self._calls.append((fn, future))
            self.preempt.set()
            self._changed.notify_all()
        return future

    def read_ahead(self, tokens: Sequence[int], slot: int = 0) -> Future:
        """Read ``tokens``, the known start of a prompt to come, into sequence ``slot`` between
        two steps (engine.decode.scheduler.Scheduler.read_ahead); the future holds how many of
        them the sequence holds then."""
        return self.call(lambda: self.scheduler.read_ahead(slot, tokens))

    def spare(self, needed_by: Callable[[Job], bool] | None) -> None:
        """Called by idle work around a decode that reads the start of a prompt to come: a job
        for which ``needed_by(job)`` holds (its prompt starts with what the decode reads, on
        its sequence) lets the decode finish rather than stop it, since the job would read
        those tokens first anyway. None: every arrival stops idle work again."""
        with self._changed:
            self._spared = needed_by

    def add_idle(self, work: Callable[[], bool], *, first: bool = False) -> None:
        """Work done in short steps while no job runs or waits, after the work added before
        (``first``: before it): ``work()`` does one step and returns whether more remains
        (measuring the verify cost after a load, reading a prompt ahead). A job that arrives
        waits for one step at most (none, for a step that decodes with ``preempt`` as its
        cancel)."""
        with self._changed:
            if first:
                self._idle.appendleft(work)
            else:
                self._idle.append(work)
            self._changed.notify_all()

    @property
    def queued(self) -> int:
        """Jobs waiting for a slot."""
        with self._changed:
            return len(self._pending) + self._snapshot["waiting"]

    @property
    def busy(self) -> bool:
        """Whether a reply ran at the last step."""
        with self._changed:
            return self._snapshot["active"] > 0

    def wake(self) -> None:
        """Look again whether idle work may run (another engine became idle)."""
        with self._changed:
            self._changed.notify_all()

    def wait_until(self, predicate: Callable[[Engine], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked whenever the engine's state changes)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def stats(self) -> dict:
        """The figures published after the last step (any thread)."""
        with self._changed:
            snap = self._snapshot
            return {"queued": len(self._pending) + snap["waiting"], "busy": snap["active"] > 0,
                    "max_queue": self.max_queue, "slots": snap["slots"], "active": snap["active"],
                    **snap["counters"], "rejected": self.counters.rejected, "cache": snap["cache"]}

    def close(self, timeout: float = 30) -> None:
        """Cancel every job (running and queued), stop the thread, then free the runtime."""
        with self._changed:
            self._closing = True
            pending, self._pending = list(self._pending), deque()
            self.preempt.set()  # an idle step under way stops
            self._changed.notify_all()
        for job in pending:
            job.cancel.set()
            job.emit(Done("cancelled", "", (), Stats()))
        if self._gate is not None:
            self._gate.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the engine thread did not stop in %.0f s", timeout)
            return
        self.runtime.close()

    # -- the engine thread ----------------------------------------------------------------
    def _loop(self) -> None:
        self.scheduler.owner.claim()  # handed over: this thread alone drives it from now on
        try:
            self._serve()
        finally:
            self.cores.leave(self)

    def _serve(self) -> None:
        while True:
            if self._gate is not None:
                self._gate.wait()
            with self._changed:
                busy = self._has_work()
            self.cores.mark(self, busy)  # (outside this engine's lock: cores wakes the others)
            with self._changed:
                self._changed.wait_for(lambda: self._closing or self._has_work()
                                       or (bool(self._idle) and self.cores.calm(self)))
                if self._closing:
                    break
                self.preempt.clear()  # whatever arrives from here on stops an idle step
                while self._pending:
                    self.scheduler.add(self._pending.popleft())
                self._snapshot = {**self._snapshot, "waiting": len(self.scheduler.waiting)}
                calls, self._calls = list(self._calls), deque()
                busy = bool(calls) or self._has_work()
            self.cores.mark(self, busy)
            for fn, future in calls:
                self._run_call(fn, future)
            if not calls and not self.scheduler.active and not self.scheduler.waiting:
                if self._idle_step():
                    self._publish()
                continue
            try:
                self.scheduler.step()
            except Exception:  # a bug: keep serving, fail what was running, log the traceback
                log.exception("an engine step failed unexpectedly")
                self.scheduler.fail_all(DuetError("the engine failed on this request (see the log)"))
            self._publish()
        self.scheduler.cancel_all()
        with self._changed:
            calls, self._calls = list(self._calls), deque()
        for _, future in calls:
            future.set_exception(DuetError("the engine has stopped"))

    def _has_work(self) -> bool:
        return bool(self._pending or self._calls or self.scheduler.active or self.scheduler.waiting)

    def _idle_step(self) -> bool:
        """One step of the first idle work, if it may run now; whether it ran."""
        # (checked after preempt was cleared: another engine busy from here on sets it again)
        if not self._idle or not self.cores.calm(self):
            return False
        work = self._idle[0]
        try:
            more = work()
        except Exception:  # a bug: the idle work is dropped, the engine goes on
            log.exception("the engine's idle work failed")
            more = False
        if not more:
            with self._changed:
                # (not popleft: work added first while this one ran is at the head now)
                with contextlib.suppress(ValueError):
                    self._idle.remove(work)
                self._changed.notify_all()
        return True

    def _publish(self) -> None:
        """The figures other threads read, as they stand now (the engine's thread, or the
        constructor before it starts)."""
        s = self.scheduler
        snap = {"waiting": len(s.waiting), "active": s.active, "slots": len(s.slots),
                "counters": dict(self.counters.__dict__), "cache": self.cache.to_json()}
        with self._changed:
            self._snapshot = snap
            self._changed.notify_all()

    def _run_call(self, fn: Callable[[], Any], future: Future) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as e:  # the caller gets it; the thread goes on
            future.set_exception(e)

    def _finished(self, job: Job, done: Done | Exception) -> None:
        if isinstance(done, Exception):
            self.counters.failed += 1
            log.warning("a request failed: %s", done)
            self._publish()
            return
        s = done.stats
        self.cache.record(s.n_prompt_tokens, s.n_cached_tokens, job.n_template)
        if done.reason == "cancelled":
            self.counters.cancelled += 1
        else:
            self.counters.completed += 1
        self._publish()  # before the job hears Done: its client reads the figures it made
        log.info("request: %d prompt tokens (%d cached), %d generated in %.2f s (%.1f tok/s, "
                 "%d/%d drafted accepted), %s; cache hit rate %.0f%%",
                 s.n_prompt_tokens, s.n_cached_tokens, s.n_tokens, s.elapsed_s, s.tokens_per_s,
                 s.accepted, s.proposed, done.reason, 100 * self.cache.to_json()["hit_rate"])
