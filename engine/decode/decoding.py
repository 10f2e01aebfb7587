"""One reply being decoded: what it puts into the next batch, and what it makes of the rows.

A ``Decoding`` holds the state of one reply on one sequence — its sampler (and grammar), its
drafter, its output (text, stop strings, limits) and its counters — and nothing of the
llama.cpp context. The scheduler (engine.decode.scheduler), which puts every active reply into
one batch, decodes ``plan()``'s tokens and hands the rows back to ``take``:

    events = d.start(last_prompt_logits)
    while d.reason is None:
        tokens = d.plan(room)                      # [pending, *forced, *draft]
        ...decode tokens, with logits for the last d.rows of them...
        events, keep = d.take(rows, verify_s)      # keep: tokens the sequence keeps cached

Each pass decodes the pending token (sampled, not yet in the cache) with a draft behind it: the
tokens a grammar forces next, then what the speculation proposes after them. ``take`` accepts
the longest prefix of the draft equal to the target's own picks (engine.decode.speculative.accept), so
the reply is the one plain decoding gives, with or without drafts and grammars. A forced token
is the only one its grammar allows, so the sampler's pick is known without its logits: the pass
asks for none (a row of logits costs about a quarter of a 1.5B step on a CPU), unless the reply
reports log-probabilities.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from engine.decode.sampling import Sampler, SamplingParams, logprob
from engine.decode.speculative.accept import accept
from engine.decode.speculative.draft import Draft
from engine.decode.stops import StopMatcher
from engine.decode.think_budget import ThinkBudget
from engine.events import Done, Event, Stats, Token
from engine.llama.detok import StreamingDetokenizer

if TYPE_CHECKING:
    from engine.llama.context import LlamaSequence
    from engine.llama.model import Model


class Drafting(Protocol):
    """What a reply needs from speculative decoding (engine.decode.speculative.speculator)."""

    name: str
    draft_ctx: LlamaSequence | None  # the draft model's context, saved beside the target's

    def begin(self, prompt: Sequence[int]) -> None: ...

    def plan(self, history: Sequence[int], room: int, sampler: Sampler, width: int = 0,
             forced: int = 0) -> Draft: ...

    def observe(self, draft: Draft, n_accepted: int, verify_s: float, lone: bool = True) -> None: ...


class GrammarState(Protocol):
    """A reply's grammar state (engine.decode.constraint.Matcher) beyond what the sampler asks."""

    @property
    def done(self) -> bool: ...

    @property
    def failed(self) -> str | None: ...

    def allows(self, token: int) -> bool: ...

    def mask(self) -> np.ndarray: ...

    def advance(self, token: int) -> None: ...

    def forced(self) -> list[int]: ...

    def valid_prefix(self, tokens: Sequence[int]) -> int: ...


class Decoding:
    """The reply to ``prompt`` (already in the cache when ``start`` is called)."""

    def __init__(self, model: Model, prompt: Sequence[int], params: SamplingParams, *,
                 speculation: Drafting | None = None, grammar: GrammarState | None = None,
                 logprobs: int | None = None, n_cached: int = 0,
                 think: ThinkBudget | None = None) -> None:
        self.prompt = list(prompt)
        self.history = list(prompt)  # the prompt, then every emitted token (the last: pending)
        self.params = params
        self.speculation = speculation
        self.grammar = grammar
        self.sampler = Sampler(params, grammar)
        self.logprobs = logprobs
        self.reason: str | None = None
        self.note: str | None = None  # why the cache could not be shifted (engine.cache.prefix.align)
        self.out = _Output(model, params)
        self.stats = _Counters(len(prompt), n_cached)
        self._draft = Draft()
        self._forced: tuple[int, ...] = ()
        self.think = think  # closes a thinking section past its budget (None: no budget)
        self._closing = 0  # how many of the forced tokens close a thinking section

    @property
    def n_tokens(self) -> int:
        return self.out.n_tokens

    @property
    def started(self) -> bool:
        """The prompt is in the cache and the first token was picked."""
        return self.stats.passes > 0

    # -- the passes -----------------------------------------------------------------------
    def start(self, logits: np.ndarray) -> list[Event]:
        """The first token, from the prompt's last logits."""
        self.stats.t_gen = time.perf_counter()
        if self.speculation is not None:
            self.speculation.begin(self.prompt)
        self.stats.passes = 1
        token = self.sampler.pick(logits, self.history)
        self._emit([(token, None, logits)])
        return self.out.flush_events()

    def plan(self, room: int, width: int = 0) -> list[int]:
        """The tokens of the next pass: the pending token and a draft of at most ``room``
        tokens behind it (``room``: what the context and max_tokens leave; ``width``: tokens
        of other sequences in the same pass)."""
        room = min(room, self.params.max_tokens - self.out.n_tokens - 1)
        self._forced, self._draft = self._propose(room, width) if room > 0 else ((), Draft())
        return [self.history[-1], *self._forced, *self._draft.tokens]

    @property
    def rows(self) -> int:
        """How many of the planned pass's last tokens need logits (``take`` wants their rows)."""
        return len(self._forced) + len(self._draft.tokens) + 1 - self._skipped

    @property
    def _skipped(self) -> int:
        """Leading rows of the pass with no logits: the forced tokens' (unless log-probabilities
        are reported)."""
        return len(self._forced) if self.logprobs is None else 0

    def take(self, rows: np.ndarray, verify_s: float = 0.0, lone: bool = True) -> tuple[list[Event], int]:
        """The logits rows of the pass ``plan`` asked for (its last ``rows`` tokens'), what the
        pass took (this sequence's share of it) and whether it was alone in the pass. Returns
        the events and how many tokens the sequence keeps cached."""
        forced, draft, s, skip = self._forced, self._draft, self.stats, self._skipped
        s.passes += 1
        base = len(self.history)
        tokens = forced + draft.tokens
        if not tokens:
            if self.speculation is not None:  # a plain step: what one costs now
                self.speculation.observe(draft, 0, verify_s, lone)
            token = self.sampler.pick(rows[0], self.history)
            self._emit([(token, None, rows[0])])
            return self.out.flush_events(), base

        def pick(i: int) -> int:  # after accept, the grammar has taken the accepted tokens
            if i > 0 and self.grammar is not None:
                self.grammar.advance(tokens[i - 1])  # accepted: the grammar moves past it
            if i < skip or i < self._closing:
                return tokens[i]  # forced: the grammar allows nothing else, or the budget
            return self.sampler.pick(rows[i - skip], self.history + list(tokens[:i]))

        verdict = accept(tokens, pick)
        n = verdict.n_accepted
        s.verify_s += verify_s
        s.proposed += len(tokens)
        s.accepted += n
        s.draft_s += draft.seconds
        forcer = "think_budget" if self._closing else "grammar"
        for source, part in ((forcer, forced), (draft.source, draft.tokens)):
            if part:
                s.used[source] = s.used.get(source, 0) + 1
        if self.speculation is not None and draft.tokens:  # its own part, and its share of the pass
            share = (len(draft.tokens) + 1) / (len(tokens) + 1)
            self.speculation.observe(draft, max(n - len(forced), 0), verify_s * share, lone and not forced)
        sources = [forcer] * len(forced) + [draft.source] * len(draft.tokens)
        emitted = [(t, sources[i], rows[i - skip] if i >= skip else None)
                   for i, t in enumerate(tokens[:n])]
        self._emit(emitted + [(verdict.next_token, None, rows[n - skip])], advanced=n)
        return self.out.flush_events(), base + n

    def stop(self, reason: str) -> None:
        """End the reply from outside (cancelled, the context is full)."""
        if self.reason is None:
            self.reason = reason

    def finish(self) -> Done:
        s = self.stats
        done = self.out.finish(self.reason or "stop", s.freeze(
            self.speculation.name if self.speculation is not None else "none"))
        return replace(done, note=self.note) if self.note else done

    # -- internals ------------------------------------------------------------------------
    def _propose(self, room: int, width: int = 0) -> tuple[tuple[int, ...], Draft]:
        """The tokens the grammar forces next (no choice to make: they are taken as they are
        verified, "jump forward"), then the speculation's draft from there, cut where the
        grammar would refuse it. The drafter plans knowing the forced tokens widen the pass.
        A thinking section past its budget is closed first: those tokens alone."""
        closing = self.think.due() if self.think is not None else []
        self._closing = min(len(closing), room)
        if closing:
            return tuple(closing[:room]), Draft()
        g = self.grammar
        forced = tuple(g.forced()[:room]) if g is not None else ()
        if self.speculation is None or len(forced) >= room:
            return forced, Draft()
        draft = self.speculation.plan(self.history + list(forced), room - len(forced),
                                      self.sampler, width + len(forced), len(forced))
        if g is not None and draft.tokens:
            n = max(g.valid_prefix(forced + draft.tokens) - len(forced), 0)
            if n < len(draft.tokens):
                draft = replace(draft, tokens=draft.tokens[:n], survival=draft.survival[:n])
        return forced, draft

    def _emit(self, tokens: list[tuple[int, str | None, np.ndarray | None]], advanced: int = 0) -> None:
        """Record emitted tokens (the first ``advanced`` already taken by the grammar)."""
        for i, (token, source, row) in enumerate(tokens):
            lp = None if self.logprobs is None or row is None else logprob(row, token, self.logprobs)
            if self.grammar is not None and i >= advanced:
                self.grammar.advance(token)
            self.history.append(token)
            reason = self.out.push(token, source, lp)
            if self.think is not None and reason is None:
                self.think.observe(self.out.parts[-1])
            if reason is None and self.grammar is not None:
                reason = _grammar_end(self.grammar)
            if reason is not None:
                self.reason = reason
                return


def _grammar_end(grammar: GrammarState) -> str | None:
    """A grammar that is complete ends the reply (stop); one past its limits ends it as cut."""
    if grammar.done:
        return "stop"
    if grammar.failed is not None:
        return "length"
    return None


class _Counters:
    def __init__(self, n_prompt: int, n_cached: int) -> None:
        self.n_prompt, self.n_cached = n_prompt, n_cached
        self.t0 = self.t_gen = time.perf_counter()
        self.prompt_s = 0.0
        self.passes = self.proposed = self.accepted = 0
        self.draft_s = self.verify_s = 0.0
        self.used: dict[str, int] = {}

    def freeze(self, drafter: str) -> Stats:
        now = time.perf_counter()
        return Stats(n_prompt_tokens=self.n_prompt, n_cached_tokens=self.n_cached,
                     prompt_s=self.prompt_s, gen_s=now - self.t_gen,
                     elapsed_s=now - self.t0, proposed=self.proposed, accepted=self.accepted,
                     target_passes=self.passes, draft_s=self.draft_s, verify_s=self.verify_s,
                     drafter=drafter, drafters_used=dict(self.used))


class _Output:
    """Turns accepted tokens into text events: UTF-8 safe, stop strings held back, limits."""

    def __init__(self, model: Model, params: SamplingParams) -> None:
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

    def push(self, tok: int, drafter: str | None, lp: object = None) -> str | None:
        """Record one token; return a finish reason if the reply ends with it."""
        self.ids.append(tok)
        if self.model.is_eog(tok):
            return "stop"
        text = self.stops.feed(self.detok.add(tok))
        self.parts.append(text)
        self._events.append(Token(tok, text, drafter is not None, drafter, logprob=lp))  # type: ignore[arg-type]
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
        eog = int(bool(self.ids) and self.model.is_eog(self.ids[-1]))
        return Done(reason, "".join(self.parts), tuple(self.ids),
                    replace(stats, n_tokens=len(self.ids), n_eog=eog), tail=tail)
