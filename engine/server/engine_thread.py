"""The single engine thread: it owns the runtime and runs queued jobs one at a time.

HTTP handlers tokenize, then ``submit`` a ``Job``; a full queue refuses at once (the caller
answers 429). The thread runs the generator (which restores the best saved conversation state
from the runtime's cache) and hands each event to ``job.emit`` (thread-safe; the server's emit
posts into the request's event loop). A job whose ``cancel`` is set stops within one target pass, or is skipped if not started.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Callable

from engine.decoding import Grammar
from engine.errors import DuetError
from engine.events import Done
from engine.runtime import Runtime
from engine.sampling import SamplingParams

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The engine's queue is at its bound."""


@dataclass
class Job:
    prompt: list[int]
    params: SamplingParams
    emit: Callable[[object], None]  # an event, then a final Done or an exception
    cancel: threading.Event = field(default_factory=threading.Event)
    n_template: int = 0  # prompt tokens that every request shares (not a cache hit)
    grammar: Grammar | None = None  # the grammar the reply follows (its state: one per job)
    logprobs: int | None = None  # report log-probabilities, with this many alternatives


@dataclass
class EngineCounters:
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    rejected: int = 0


class EngineThread:
    """Runs jobs on ``runtime`` (which it owns from now on) in one daemon thread.

    ``gate``: when given, the thread waits for it before taking each job (tests hold the engine
    with it to fill the queue deterministically)."""

    def __init__(self, runtime: Runtime, *, max_queue: int = 8,
                 gate: threading.Event | None = None) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be >= 1")
        self.runtime = runtime
        self.cache = runtime.cache  # the generator prepares each prompt with it (its budget:
        # RuntimeConfig.state_cache_bytes)
        self.counters = EngineCounters()
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self._gate = gate
        self._busy = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="duet-engine", daemon=True)
        self._thread.start()

    # -- the handlers' side ---------------------------------------------------------------
    def submit(self, job: Job) -> None:
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self.counters.rejected += 1
            raise QueueFull from None
        with self._changed:
            self._changed.notify_all()

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    @property
    def busy(self) -> bool:
        return self._busy

    def wait_until(self, predicate: Callable[[EngineThread], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked whenever the queue changes)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def stats(self) -> dict:
        return {"queued": self.queued, "busy": self._busy, "max_queue": self._queue.maxsize,
                **self.counters.__dict__, "cache": self.cache.to_json()}

    def close(self, timeout: float = 30) -> None:
        """Stop after the running job (queued ones are cancelled); then free the runtime."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel.set()
                job.emit(Done("cancelled", "", (), _empty_stats()))
        if self._gate is not None:
            self._gate.set()
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the engine thread did not stop in %.0f s", timeout)
            return
        self.runtime.close()

    # -- the engine thread ----------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            if self._gate is not None:
                self._gate.wait()
            job = self._queue.get()
            if job is None:
                return
            self._set_busy(True)
            try:
                self._run(job)
            finally:
                self._set_busy(False)

    def _set_busy(self, busy: bool) -> None:
        with self._changed:
            self._busy = busy
            self._changed.notify_all()

    def _run(self, job: Job) -> None:
        if job.cancel.is_set():
            self.counters.cancelled += 1
            job.emit(Done("cancelled", "", (), _empty_stats()))
            return
        rt = self.runtime
        try:
            for ev in rt.generator.complete(job.prompt, job.params, job.cancel,
                                            grammar=job.grammar, logprobs=job.logprobs):
                if isinstance(ev, Done):
                    self._finished(job, ev)
                job.emit(ev)
        except DuetError as e:
            self.counters.failed += 1
            log.warning("a request failed: %s", e)
            job.emit(e)
        except Exception as e:  # a bug: keep serving, tell the client, log the traceback
            self.counters.failed += 1
            log.exception("a request failed unexpectedly")
            job.emit(e)

    def _finished(self, job: Job, done: Done) -> None:
        s = done.stats
        self.cache.record(s.n_prompt_tokens, s.n_cached_tokens, job.n_template)
        if done.reason == "cancelled":
            self.counters.cancelled += 1
        else:
            self.counters.completed += 1
        log.info("request: %d prompt tokens (%d cached), %d generated in %.2f s (%.1f tok/s, "
                 "%d/%d drafted accepted), %s; cache hit rate %.0f%%",
                 s.n_prompt_tokens, s.n_cached_tokens, s.n_tokens, s.elapsed_s, s.tokens_per_s,
                 s.accepted, s.proposed, done.reason, 100 * self.cache.to_json()["hit_rate"])


def _empty_stats():
    from engine.events import Stats

    return Stats()
