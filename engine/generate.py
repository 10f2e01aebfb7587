"""The generation loop: prompt → (speculative) decoding steps → a stream of events.

The target context's token mirror is the conversation's cache. A new turn decodes only the
tokens past the longest common prefix with what is cached; an edit or a regenerate rewinds to
that prefix instead of starting over. When the reply ends, the cache holds the prompt and every
generated token but the last one (which was sampled, not decoded). With a ``StateCache``, a
prompt that would discard a long stretch of the context (another conversation, another version
of a reply) first saves it, and restores a saved state that shares more with the prompt.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Iterator, Protocol, Sequence

import numpy as np

from engine.chat import Message
from engine.context import Context
from engine.detok import StreamingDetokenizer
from engine.errors import ContextFullError, DecodeError
from engine.events import Done, Event, PromptProgress, Stats, Token
from engine.prompt import fit_messages
from engine.sampling import Sampler, SamplingParams, penalized
from engine.speculative.accept import verify
from engine.speculative.draft import Draft
from engine.stops import StopMatcher

if TYPE_CHECKING:
    from engine.state_cache import StateCache

log = logging.getLogger(__name__)

PREFILL_CHUNK = 256  # prompt tokens per progress event / cancellation point


class Speculation(Protocol):
    """What the loop needs from speculative decoding (engine.speculative.speculator implements it)."""

    def begin(self, prompt: Sequence[int]) -> None: ...

    def plan(self, history: Sequence[int], room: int, sampler: Sampler) -> Draft: ...

    def observe(self, draft: Draft, n_accepted: int, verify_s: float) -> None: ...


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


MIN_SHIFT_GAIN = 16  # tokens a cache shift must save over a rewind to be worth it
MAX_SHIFT_CANDIDATES = 512  # where the kept part may start (usually a message boundary)


def dropped_span(cached: Sequence[int], prompt: Sequence[int]) -> tuple[int, int, int] | None:
    """(p, d, kept) when ``prompt`` starts with ``cached[:p] + cached[p+d:p+d+kept]``: the
    oldest turns after the shared head (the system prompt) were dropped to fit the context.
    Picks the span keeping most tokens; None when no shift keeps more than rewinding to p."""
    p = common_prefix(cached, prompt)
    if p >= len(cached) or p >= len(prompt):
        return None
    old = np.asarray(cached[p:], dtype=np.int64)
    new = np.asarray(prompt[p:], dtype=np.int64)
    best: tuple[int, int, int] | None = None
    for d in np.nonzero(old == new[0])[0][:MAX_SHIFT_CANDIDATES]:
        n = min(len(old) - d, len(new))
        same = old[d:d + n] == new[:n]
        kept = n if same.all() else int(np.argmin(same))
        if kept >= MIN_SHIFT_GAIN and (best is None or kept > best[2]):
            best = (p, int(d), kept)
    return best


def align(ctx: Context, prompt: Sequence[int]) -> tuple[int, int, str | None]:
    """Make ``ctx`` hold the longest reusable part of ``prompt``; return (tokens reused,
    tokens dropped by a cache shift, why a shift was not possible or None).

    Reuses the common prefix; when the conversation outgrew the context and its oldest turns
    were dropped, removes them from the cache and shifts the rest down instead of recomputing
    it. At least the last prompt token is left to decode (its logits are needed)."""
    shift = dropped_span(ctx.tokens, prompt)
    dropped, note = 0, None
    if shift is not None:
        p, d, _ = shift
        if ctx.drop(p, p + d):
            dropped = d
        else:
            note = (f"{ctx.model.display_name} cannot shift its cache: the "
                    f"{len(ctx.tokens) - p - d} tokens after the dropped turns are recomputed")
            log.info(note)
    reuse = min(common_prefix(ctx.tokens, prompt), len(prompt) - 1)
    ctx.rewind(reuse)
    return reuse, dropped, note


class Generator:
    """Streams replies for one conversation on ``ctx`` (owned by one thread)."""

    def __init__(self, ctx: Context, speculation: Speculation | None = None,
                 cache: StateCache | None = None) -> None:
        self.ctx = ctx
        self.model = ctx.model
        self.speculation = speculation
        self.cache = cache  # saved states of other conversations and reply versions
        self.last_dropped = 0  # messages the last ``chat`` left out to fit the context
        self.shift_note: str | None = None  # why the last reply could not shift the cache

    def chat(self, messages: Sequence[Message], params: SamplingParams,
             cancel: threading.Event | None = None) -> Iterator[Event]:
        """Reply to ``messages`` (the last is the user's). Oldest turns are dropped if needed."""
        budget = self.ctx.n_ctx - min(params.max_tokens, self.ctx.n_ctx // 4)
        try:
            tokens, self.last_dropped = fit_messages(self.model, messages, budget, cancel=cancel)
        except DecodeError:
            if cancel is None or not cancel.is_set():
                raise
            return iter([Done("cancelled", "", (), Stats())])  # cancelled while fitting
        return self.complete(tokens, params, cancel)

    def complete(self, prompt: Sequence[int], params: SamplingParams,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        """Continue ``prompt`` (token ids). A generator of events ending with one ``Done``."""
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) >= self.ctx.n_ctx:
            raise ContextFullError(
                f"the prompt ({len(prompt)} tokens) does not fit the context ({self.ctx.n_ctx})")
        return self._run(list(prompt), params, cancel or threading.Event())

    # -- the loop -------------------------------------------------------------------------
    def _run(self, prompt: list[int], params: SamplingParams,
             cancel: threading.Event) -> Iterator[Event]:
        ctx, model = self.ctx, self.model
        t0 = time.perf_counter()
        if self.cache is not None:
            self.cache.prepare(self._contexts(), prompt)
        reuse, _, self.shift_note = align(ctx, prompt)
        out = _Output(model, params)
        stats = _Counters(n_prompt=len(prompt), n_cached=reuse)
        try:
            for done in range(reuse, len(prompt), PREFILL_CHUNK):
                ctx.decode(prompt[done:done + PREFILL_CHUNK], cancel=cancel)
                yield PromptProgress(min(done + PREFILL_CHUNK, len(prompt)) - reuse,
                                     len(prompt) - reuse)
        except DecodeError:
            if not cancel.is_set():
                raise
            yield out.finish("cancelled", stats.freeze(t0, t0, self._drafter_name()))
            return
        t_gen = time.perf_counter()
        stats.prompt_s = t_gen - t0
        if self.speculation is not None:
            self.speculation.begin(prompt)
        sampler = Sampler(params)
        pending = sampler.sample(ctx.logits(), prompt)
        stats.passes = 1
        reason = out.push(pending, False, None)
        yield from out.flush_events()
        while reason is None:
            if cancel.is_set():
                reason = "cancelled"
                break
            if ctx.n_free < 1:
                reason = "context_full"
                break
            history = ctx.tokens + [pending]
            room = min(ctx.n_free - 1, params.max_tokens - out.n_tokens - 1)
            draft = self._plan(history, room, sampler)
            emitted = self._step(history, draft, sampler, stats)
            for tok, from_draft in emitted:
                reason = out.push(tok, from_draft, draft.source if from_draft else None)
                if reason is not None:
                    break
            yield from out.flush_events()
            pending = emitted[-1][0]
        # Keep the cache = prompt + generated tokens except the last (never decoded).
        ctx.rewind(len(prompt) + max(out.n_tokens - 1, 0))
        yield out.finish(reason, stats.freeze(t0, t_gen, self._drafter_name()))

    def _plan(self, history: list[int], room: int, sampler: Sampler) -> Draft:
        if self.speculation is None or room < 1:
            return Draft(())
        return self.speculation.plan(history, room, sampler)

    def _step(self, history: list[int], draft: Draft, sampler: Sampler,
              stats: _Counters) -> list[tuple[int, bool]]:
        """Decode the pending token (and a draft behind it); return the tokens it yields."""
        ctx = self.ctx
        pending = history[-1]
        stats.passes += 1
        if not draft.tokens:
            ctx.decode([pending])
            return [(sampler.sample(ctx.logits(), history), False)]
        t = time.perf_counter()
        ctx.decode([pending, *draft.tokens], logits="all")
        rows = ctx.logits_rows()
        p = sampler.params
        if p.greedy:
            if p.repeat_penalty != 1.0:
                rows = np.stack([penalized(rows[i], p.window(history + list(draft.tokens[:i])),
                                           p.repeat_penalty) for i in range(len(rows))])
            verdict = verify(draft.tokens, rows)
        else:
            target = np.stack([sampler.probs(rows[i], history + list(draft.tokens[:i]))
                               for i in range(len(rows))])
            verdict = verify(draft.tokens, target, draft_probs=draft.probs, rng=sampler.rng)
        n_acc = verdict.n_accepted
        ctx.rewind(len(history) + n_acc)
        verify_s = time.perf_counter() - t
        stats.verify_s += verify_s
        stats.proposed += len(draft.tokens)
        stats.accepted += n_acc
        stats.draft_s += draft.seconds
        stats.used[draft.source] = stats.used.get(draft.source, 0) + 1
        if self.speculation is not None:
            self.speculation.observe(draft, n_acc, verify_s)
        return [(t, True) for t in draft.tokens[:n_acc]] + [(verdict.next_token, False)]

    def _contexts(self) -> list[Context]:
        """The target's context, and the draft model's when there is one (saved alongside)."""
        draft = getattr(self.speculation, "draft_ctx", None)
        return [self.ctx] if draft is None else [self.ctx, draft]

    def _drafter_name(self) -> str:
        return getattr(self.speculation, "name", "none") if self.speculation else "none"


class _Counters:
    def __init__(self, n_prompt: int, n_cached: int) -> None:
        self.n_prompt, self.n_cached = n_prompt, n_cached
        self.prompt_s = 0.0
        self.passes = self.proposed = self.accepted = 0
        self.draft_s = self.verify_s = 0.0
        self.used: dict[str, int] = {}

    def freeze(self, t0: float, t_gen: float, drafter: str) -> Stats:
        now = time.perf_counter()
        return Stats(n_prompt_tokens=self.n_prompt, n_cached_tokens=self.n_cached,
                     prompt_s=self.prompt_s, gen_s=now - t_gen,
                     elapsed_s=now - t0, proposed=self.proposed, accepted=self.accepted,
                     target_passes=self.passes, draft_s=self.draft_s, verify_s=self.verify_s,
                     drafter=drafter, drafters_used=dict(self.used))


class _Output:
    """Turns accepted tokens into text events: UTF-8 safe, stop strings held back, limits."""

    def __init__(self, model, params: SamplingParams) -> None:
        self.model = model
        self.params = params
        self.detok = StreamingDetokenizer(model.piece)
        self.stops = StopMatcher(params.stop)
        self.ids: list[int] = []
        self.parts: list[str] = []
        self._events: list[Event] = []

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    def push(self, tok: int, from_draft: bool, drafter: str | None) -> str | None:
        """Record one token; return a finish reason if the reply ends with it."""
        self.ids.append(tok)
        if self.model.is_eog(tok):
            return "stop"
        text = self.stops.feed(self.detok.add(tok))
        self.parts.append(text)
        self._events.append(Token(tok, text, from_draft, drafter))
        if self.stops.stopped:
            return "stop"
        if len(self.ids) >= self.params.max_tokens:
            return "length"
        return None

    def flush_events(self) -> list[Event]:
        """The events of this step, the last token marked ``step_end``."""
        events, self._events = self._events, []
        if events and isinstance(events[-1], Token):
            events[-1] = replace(events[-1], step_end=True)
        return events

    def finish(self, reason: str, stats: Stats) -> Done:
        tail = self.stops.feed(self.detok.flush()) + self.stops.flush()
        self.parts.append(tail)
        return Done(reason, "".join(self.parts), tuple(self.ids),
                    replace(stats, n_tokens=len(self.ids)), tail=tail)
