"""Replies decoded together: every step puts the next tokens of every active sequence — a reply's
pending token and its draft, a slice of a new prompt — into one llama_decode (continuous
batching, as llama.cpp's server does with its slots).

Each sequence of the runtime's context is a ``Slot``. A job waits until a slot is free; it takes
the free slot whose cache shares most with its prompt (the state cache may restore a saved one
there first, after saving what the slot held). A long prompt is decoded in slices — large while
nothing else runs, small while other replies stream, so that a new client does not stall them.
Prompts read at the same time that start the same way (one agent's parallel requests, with one
system prompt and tools) read that start once: the others wait for it and copy its cells.
Each reply is a ``Decoding`` (engine.decode.decoding) with its own sampler, grammar, drafter state, stop
rules and counters; cancel, the context limit and the end of a reply free a slot at once without
touching the others. Owned by one thread: ``step`` is called by the engine's thread only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.cache.prefix import align, common_prefix, dropped_span
from engine.decode.decoding import Decoding, Drafting, GrammarState
from engine.decode.owner import Owner
from engine.decode.sampling import SamplingParams
from engine.decode.think_budget import ThinkBudget
from engine.errors import CellsFullError, ContextFullError, DecodeError, DuetError
from engine.events import Done, PromptProgress, Stats
from engine.llama.abort import Cancel
from engine.llama.context import LlamaSequence, Part, decode_batch

if TYPE_CHECKING:
    from engine.cache.state_cache import StateCache
    from engine.chat.reasoning import ThinkSpec

log = logging.getLogger(__name__)

# Prompt tokens decoded per step: alone, a slice as large as a batch (fewest passes); beside
# replies that stream, a smaller slice, so that each of their steps stays short. A pass costs
# about 29 ms more than its tokens on the 2-core CPU (1,024 prompt tokens read in slices of 64:
# 160 tok/s; of 128 to 512: 166, scripts/profile_parallel.py --prefill): slices of 128 lose 4%
# to that (64: 7%) and hold a streaming reply's step to about 0.8 s; four clients at once,
# in-process, in turns: 24.06 against 22.64 tok/s with 64 (three pairs, 1.02-1.07x).
PREFILL_ALONE = 256
PREFILL_SHARED = 128
# ... or more where this machine reads more than that in the time a slice of 128 takes on that
# CPU, which a streaming reply already waits there: a GPU reads a 450-token prompt in one pass
# where slices of 128 made four (on the H200 the aggregate moved within its run-to-run spread,
# docs/benchmarks/gpu.md). The rate is measured on the passes themselves.
SHARED_SLICE_S = 0.8


def shared_slice(s_per_token: float | None) -> int:
    """Prompt tokens per pass beside streaming replies, at a measured reading rate (the batch's
    room caps it)."""
    if not s_per_token:
        return PREFILL_SHARED
    return max(PREFILL_SHARED, int(SHARED_SLICE_S / s_per_token))


@dataclass(eq=False)
class Job:
    """A reply to compute: ``emit`` gets its events, then a final Done (or an exception)."""

    prompt: list[int]
    params: SamplingParams
    emit: Callable[[object], None]
    cancel: threading.Event = field(default_factory=Cancel)
    n_template: int = 0  # prompt tokens that every request shares (not a cache hit)
    grammar: GrammarState | None = None  # the grammar the reply follows (its state: one per job)
    logprobs: int | None = None  # report log-probabilities, with this many alternatives
    slot: int | None = None  # the sequence it must run on (the app's own conversation)
    speculate: bool = True  # False: plain decoding for this reply (a chat whose preset says none)
    think: ThinkSpec | None = None  # a reasoning model's turn (its thinking budget)


class Slot:
    def __init__(self, ctx: LlamaSequence, speculation: Drafting | None) -> None:
        self.ctx = ctx
        self.speculation = speculation
        self.job: Job | None = None
        self.decoding: Decoding | None = None
        self.pos = 0  # prompt tokens in the cache
        self.last_used = 0

    @property
    def contexts(self) -> list[LlamaSequence]:
        """The slot's context, and the draft model's when it drafts with one (saved alongside)."""
        draft = self.speculation.draft_ctx if self.speculation is not None else None
        return [self.ctx] if draft is None else [self.ctx, draft]


class Scheduler:
    def __init__(self, contexts: tuple[LlamaSequence, ...], speculations: Sequence[Drafting | None],
                 cache: StateCache | None = None, *, reserved: int = 0,
                 on_finished: Callable[[Job, Done | Exception], None] | None = None) -> None:
        """``reserved``: the first slots only run jobs pinned to them (``Job.slot``)."""
        self.slots = [Slot(c, s) for c, s in zip(contexts, speculations)]
        self.model = contexts[0].model
        self.cache = cache
        self.reserved = reserved
        self.waiting: deque[Job] = deque()
        self.on_finished = on_finished
        self._clock = 0
        self.s_per_token: float | None = None  # of the last pass of PREFILL_SHARED tokens or more
        self.copies = True  # False once the memory could not share part of a sequence (recurrent)
        self.owner = Owner("the scheduler")  # its entry points check it (engine.decode.owner)

    @property
    def active(self) -> int:
        return sum(s.job is not None for s in self.slots)

    def add(self, job: Job) -> None:
        self.owner.check()
        self.waiting.append(job)

    def abandon(self, job: Job) -> None:
        """End ``job`` as cancelled without setting its cancel event (nobody reads it now)."""
        self.owner.check()
        if job in self.waiting:
            self.waiting.remove(job)
            return
        for s in self.slots:
            if s.job is job:
                self._finish(s, "cancelled")

    def fail_all(self, error: Exception) -> None:
        """Fail every running reply with ``error`` (a step failed unexpectedly)."""
        self.owner.check()
        for s in self.slots:
            if s.job is not None:
                self._fail(s, error)

    def cancel_all(self) -> None:
        """End every reply and waiting job (the engine stops)."""
        self.owner.check()
        for job in self.waiting:
            job.cancel.set()
        for s in self.slots:
            if s.job is not None:
                s.job.cancel.set()
        while self.waiting:
            job = self.waiting.popleft()
            job.emit(Done("cancelled", "", (), Stats()))
        for s in self.slots:
            if s.job is not None:
                self._finish(s, "cancelled")

    # -- one step -------------------------------------------------------------------------
    def step(self) -> bool:
        """Admit waiting jobs, then decode one batch for every active sequence. False when
        there was nothing to do."""
        self.owner.check()
        self._admit()
        for s in self.slots:
            if s.job is not None and s.decoding is not None:
                if s.job.cancel.is_set():
                    self._finish(s, "cancelled")
                elif s.decoding.started and s.ctx.n_free < 1:
                    self._finish(s, "context_full")
                elif not s.decoding.started:
                    self._catch_up(s, s.decoding)
        busy = [s for s in self.slots if s.job is not None]
        if not busy:
            return False
        parts, owners = self._batch(busy)
        if not parts:
            return True
        # a pass that is one reply's alone can stop inside llama_decode when it is cancelled (a
        # long prompt's slice); one shared with others runs to its end, the cancel seen after it
        alone = owners[0].job.cancel if all(s is owners[0] for s in owners) and owners[0].job else None
        t = time.perf_counter()
        try:
            rows = decode_batch(parts, cancel=alone)
        except CellsFullError as e:
            if not self._free_idle():  # else the same batch goes again at the next step
                self._failed_batch(owners, e)
            return True
        except DuetError as e:
            self._failed_batch(owners, e)
            return True
        elapsed = time.perf_counter() - t
        total = sum(len(p.tokens) for p in parts)
        if total >= PREFILL_SHARED:
            self.s_per_token = elapsed / total
        for s, part, r in zip(owners, parts, rows):
            self._take(s, part, r, elapsed * len(part.tokens) / total, len(parts) == 1)
        return True

    def _failed_batch(self, owners: list[Slot], error: DuetError) -> None:
        """A pass failed: cancelled replies end as such, replies streaming when the cells ran
        out end as cut by the context, the others fail with ``error``."""
        for s in owners:
            if s.job is None or s.decoding is None:
                continue
            if s.job.cancel.is_set():
                self._finish(s, "cancelled")
            elif isinstance(error, CellsFullError) and s.decoding.started:
                self._finish(s, "context_full")
            else:
                self._fail(s, error)

    def _free_idle(self) -> bool:
        """The shared cells ran out: free those of sequences no reply runs on (the state cache
        keeps what they held, when worth it). False when there were none."""
        idle = [s for s in self.slots if s.job is None and s.ctx.tokens]
        for s in idle:
            if self.cache is not None:
                self.cache.keep(s.ctx)
            s.ctx.clear()
        if idle:
            log.info("the KV cache is full: freed %d idle sequences", len(idle))
        return bool(idle)

    def _batch(self, busy: list[Slot]) -> tuple[list[Part], list[Slot]]:
        """The next batch: every streaming reply's step first, then slices of new prompts."""
        budget = self.slots[0].ctx.n_batch
        parts: list[Part] = []
        owners: list[Slot] = []
        streaming = [s for s in busy if s.decoding is not None and s.decoding.started]
        for i, s in enumerate(streaming):
            d = s.decoding
            assert d is not None
            # beside this reply: the tokens planned so far and one for each reply still to plan
            width = sum(len(p.tokens) for p in parts) + len(streaming) - 1 - i
            tokens = d.plan(min(s.ctx.n_free - 1, budget - len(busy)), width)
            parts.append(Part(s.ctx, tokens, d.rows))
            owners.append(s)
            budget -= len(tokens)
        slice_ = shared_slice(self.s_per_token) if streaming else PREFILL_ALONE
        reading: list[Slot] = []  # the prompts read in this pass
        for s in busy:
            d = s.decoding
            if d is None or d.started or budget <= 0:
                continue
            prompt = d.prompt
            # a reply that reports log-probabilities reads its prompt's last token in a pass of
            # its own, as it does when the rest of the prompt was cached: its first token's
            # log-probabilities do not depend on what the cache held (README, local server)
            end = len(prompt) - 1 if d.logprobs is not None and s.pos < len(prompt) - 1 \
                else len(prompt)
            n = min(end - s.pos, slice_, budget)
            if self._follows(s, prompt, n, reading):
                continue
            last = s.pos + n == len(prompt)
            parts.append(Part(s.ctx, prompt[s.pos:s.pos + n], "last" if last else "none"))
            owners.append(s)
            reading.append(s)
            budget -= n
        return parts, owners

    def _follows(self, s: Slot, prompt: Sequence[int], n: int, reading: list[Slot]) -> bool:
        """True when the ``n`` tokens ``s`` would read next are all read in this pass by
        another prompt that starts the same way (parallel requests with one system prompt and
        tools): ``s`` waits and copies them (``_catch_up``) rather than reading them again. It
        loses no pass by it; fewer shared tokens than that, it reads them beside its own."""
        end = s.pos + n  # (its last token is decoded for its logits: never copied)
        return self.copies and end < len(prompt) and any(
            o.decoding is not None and o.decoding.prompt[:end] == prompt[:end] for o in reading)

    def _catch_up(self, s: Slot, d: Decoding) -> None:
        """A prompt being read takes what another sequence holds of its next tokens (read
        since, by a prompt that starts the same way) as a copy of cells; they count as cached."""
        held = len(s.ctx.tokens)
        if self._borrow(s, d.prompt):
            s.pos = len(s.ctx.tokens)
            d.stats.n_cached += s.pos - held
        elif len(s.ctx.tokens) != held:  # the copy failed and cleared the sequence
            s.pos = d.stats.n_cached = 0

    def _take(self, s: Slot, part: Part, rows: Any, share_s: float, lone: bool) -> None:
        d, job = s.decoding, s.job
        assert d is not None and job is not None
        if d.started:
            events, keep = d.take(rows, share_s, lone)
            s.ctx.rewind(keep)
        else:
            s.pos += len(part.tokens)
            events = [PromptProgress(s.pos - d.stats.n_cached, len(d.prompt) - d.stats.n_cached)]
            if s.pos == len(d.prompt):
                d.stats.prompt_s = time.perf_counter() - d.stats.t0
                if self.cache is not None:  # a long prompt read is kept on disk
                    self.cache.prefilled(s.contexts, len(d.prompt) - d.stats.n_cached)
                events += d.start(rows[-1])
        for ev in events:
            job.emit(ev)
        if d.reason is not None:
            self._finish(s)

    # -- slots ----------------------------------------------------------------------------
    def _admit(self) -> None:
        held: list[Job] = []
        while self.waiting:
            job = self.waiting.popleft()
            if job.cancel.is_set():
                job.emit(Done("cancelled", "", (), Stats()))
                continue
            slot = self._choose(job)
            if slot is None:
                held.append(job)
                continue
            try:
                self._begin(slot, job)
            except DuetError as e:
                slot.job = slot.decoding = None
                self._failed(job, e)
        self.waiting.extendleft(reversed(held))

    def _choose(self, job: Job) -> Slot | None:
        """A free slot for ``job``: the one it is pinned to, else the free one that reuses the
        most of its prompt less what it would throw away of another conversation (every prompt
        shares the template's opening, which says nothing); ties: the least recently used."""
        if job.slot is not None:
            s = self.slots[job.slot]
            return s if s.job is None else None
        free = [s for s in self.slots[self.reserved:] if s.job is None]
        if not free:
            return None

        def score(s: Slot) -> tuple[int, int]:
            kept = common_prefix(s.ctx.tokens, job.prompt)
            return kept - (len(s.ctx.tokens) - kept), -s.last_used

        return max(free, key=score)

    def read_ahead(self, slot: int, tokens: Sequence[int], cancel: threading.Event | None = None,
                   most: int | None = None) -> int:
        """Read ``tokens``, the known start of a prompt to come, into sequence ``slot``: the one
        way Duet reads ahead (a tool's result awaited, the message being typed, the template's
        opening). Nothing while a reply runs there or when they cannot fit. What the sequence
        shares with them stays; when the rest must go, the state cache keeps it first (or gives
        a better start), as for a job. ``most``: at most this many tokens (a slice of idle
        work); ``cancel`` stops the decode under way (its tokens are dropped: what was read
        before stays). Returns how many of ``tokens`` the sequence holds now."""
        self.owner.check()
        s = self.slots[slot]
        if s.job is not None or len(tokens) >= s.ctx.n_ctx:
            return 0
        keep = common_prefix(s.ctx.tokens, tokens)
        if keep < len(s.ctx.tokens):
            if self.cache is not None:  # another conversation's state is kept (or one restored)
                self.cache.prepare(s.contexts, tokens, self.s_per_token)
                keep = common_prefix(s.ctx.tokens, tokens)
            s.ctx.rewind(keep)
        end = len(tokens) if most is None else min(len(tokens), keep + most)
        if end > keep:
            try:
                s.ctx.decode(tokens[keep:end], logits="none", cancel=cancel)
            except DecodeError:
                if cancel is None or not cancel.is_set():
                    raise
                return keep
        return end

    def holds(self, slot: int, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` sequence ``slot`` holds now."""
        self.owner.check()
        return common_prefix(self.slots[slot].ctx.tokens, tokens)

    def _begin(self, s: Slot, job: Job) -> None:
        if len(job.prompt) >= s.ctx.n_ctx:
            raise ContextFullError(f"the prompt ({len(job.prompt)} tokens) does not fit the "
                                   f"context ({s.ctx.n_ctx})")
        if self.cache is not None:
            self.cache.prepare(s.contexts, job.prompt, self.s_per_token)
        self._borrow(s, job.prompt)
        reuse, _, note = align(s.ctx, job.prompt)
        self._clock += 1
        s.job, s.pos, s.last_used = job, reuse, self._clock
        # log-probabilities come from one-row passes: a verify pass computes the same logits
        # in another batch shape, whose rounding differs (as llama-server, no drafting then)
        drafts = job.speculate and job.logprobs is None
        think = job.think
        budget = None if think is None or think.budget is None else ThinkBudget(
            think.budget, think.inside,
            lambda text: self.model.tokenize(text, add_special=False, parse_special=True))
        s.decoding = Decoding(self.model, job.prompt, job.params,
                              speculation=s.speculation if drafts else None,
                              grammar=job.grammar, logprobs=job.logprobs, n_cached=reuse,
                              think=budget)
        s.decoding.note = note

    def _borrow(self, s: Slot, prompt: Sequence[int]) -> bool:
        """When another sequence holds more of ``prompt`` than ``s`` does (the system prompt
        and tools that an agent's parallel requests share), ``s`` takes that prefix from it:
        a copy of cells in the shared cache, where reading it again would cost a prefill.
        True when it did."""
        if not self.copies:
            return False
        if dropped_span(s.ctx.tokens, prompt) is not None:
            return False  # a cache shift keeps more of this sequence's own conversation
        own = common_prefix(s.ctx.tokens, prompt)
        n, src = max(((common_prefix(o.ctx.tokens, prompt), o) for o in self.slots if o is not s),
                     key=lambda x: x[0], default=(0, s))
        n = min(n, len(prompt) - 1)  # the last prompt token is decoded for its logits
        if n <= own:
            return False
        if not s.ctx.copy_from(src.ctx, n):
            self.copies = False
            return False
        return True

    def _finish(self, s: Slot, reason: str | None = None) -> None:
        d, job = s.decoding, s.job
        assert d is not None and job is not None
        if reason is not None:
            d.stop(reason)
        if d.started:  # the cache keeps the prompt and every generated token but the last
            s.ctx.rewind(len(d.prompt) + max(d.n_tokens - 1, 0))
        else:
            s.ctx.rewind(s.pos)
        done = d.finish()
        s.job = s.decoding = None
        if self.on_finished is not None:
            self.on_finished(job, done)
        job.emit(done)

    def _fail(self, s: Slot, error: Exception) -> None:
        job = s.job
        assert job is not None
        s.job = s.decoding = None
        s.ctx.rewind(min(s.pos, s.ctx.n_past))
        self._failed(job, error)

    def _failed(self, job: Job, error: Exception) -> None:
        if self.on_finished is not None:
            self.on_finished(job, error)
        job.emit(error)

