"""Reading a prompt before it is sent: while the person types, the window hands the prompt
their message would make so far (engine.prompts: the conversation, attachments, the words
typed), and the engine reads it into the conversation's sequence in short steps whenever it
has nothing else to do. When the message is sent, its prompt finds that start cached and reads
only the rest.

Each step is one slice of the scheduler's reading ahead (engine.decode.scheduler.Scheduler.
read_ahead, the one way Duet reads ahead: a tool's result awaited and the template's opening too).
Lowest priority: each step is the engine's idle work (engine.runtime.service), run only while no
reply or call runs or waits, and it decodes with the engine's ``preempt`` event as its cancel,
so a reply, a tool call or a server request that arrives stops the step at once (its tokens are
dropped; the tokens read before stay). One arrival does not: the message itself, sent while the
step reads the start of its prompt (Engine.spare), waits for the step's end. A new prompt
replaces the old one: what the two share stays read, the rest is cut back (sequence removal)
before the new tokens are read. Only the start the final prompt shares with what was read is
ever used (the prompt cache's common prefix), and with exact decoding a token's state does not
depend on the batch it was read in, so the reply is the one it would be without reading ahead
(tests/engine/runtime/test_ahead.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from engine.errors import DecodeError
from engine.runtime.service import Engine

log = logging.getLogger(__name__)

# Tokens read in one step: a pass costs about 29 ms more than its tokens on the 2-core CPU,
# so steps of 64 lose about 7% to that against one long pass (engine.decode.scheduler's
# measurement); a step that a reply interrupts loses its tokens, at most 64 (under a second of
# reading on the 1.5B there).
STEP = 64


class ReadAhead:
    """Reads ``want``'s tokens into ``engine``'s sequence ``slot`` while it is idle.
    ``on_read(held, total)``: after each step, on the engine's thread, how many of the wanted
    prompt's tokens the sequence holds."""

    def __init__(self, engine: Engine, slot: int = 0, *, step: int = STEP,
                 on_read: Callable[[int, int], None] | None = None) -> None:
        self.engine, self.slot, self.step = engine, slot, step
        self.on_read = on_read
        self._lock = threading.Lock()
        self._target: list[int] | None = None
        self._queued = False  # its step is in the engine's idle work
        self.read = 0  # tokens this object decoded (all prompts, for the record)

    def want(self, tokens: Sequence[int]) -> None:
        """Read ``tokens`` from now on (any thread); they replace what was wanted before."""
        with self._lock:
            self._target = list(tokens)
            queue = not self._queued
            self._queued = True
        if queue:
            self.engine.add_idle(self._step, first=True)

    def stop(self) -> None:
        """Read nothing more (a step under way ends as it is); what was read stays."""
        with self._lock:
            self._target = None

    # -- the engine's thread --------------------------------------------------------------
    def _step(self) -> bool:
        with self._lock:
            target = self._target
        more = False
        if target is not None:
            try:
                more = self._read(target)
            except DecodeError as e:  # a full context, a lost worker: the send will say so
                log.info("reading ahead stopped: %s", e)
                self._drop(target)
        with self._lock:
            if self._target is not target and self._target is not None:
                return True  # another prompt came meanwhile: on with it
            if not more:
                self._queued = False
            return more

    def _read(self, target: list[int]) -> bool:
        """One slice towards ``target`` (engine.decode.scheduler.Scheduler.read_ahead, the one
        way to read ahead); whether more remains."""
        scheduler, preempt = self.engine.scheduler, self.engine.preempt
        start = scheduler.holds(self.slot, target)
        end = min(len(target), start + self.step)
        # the message sent while this step reads its own start (Enter after the last word):
        # its reply waits for the step rather than dropping it and reading the tokens again
        self.engine.spare(lambda job: job.slot == self.slot and job.prompt[:end] == target[:end])
        try:
            held = scheduler.read_ahead(self.slot, target, preempt, most=self.step)
        finally:
            self.engine.spare(None)
        if held == 0 and preempt.is_set():
            return True  # stopped for a newcomer: on later, if this is still wanted
        if held == 0:
            return False  # a reply holds the sequence; a prompt that cannot fit is not read
        self.read += max(0, held - start)
        self._report(held, target)
        return held < len(target)

    def _report(self, held: int, target: list[int]) -> None:
        if self.on_read is not None:
            self.on_read(held, len(target))

    def _drop(self, target: list[int]) -> None:
        with self._lock:
            if self._target is target:
                self._target = None
