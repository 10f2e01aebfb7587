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
from typing import TYPE_CHECKING, Iterator, Sequence

from engine.chat import Message
from engine.context import Context
from engine.errors import ContextFullError, DecodeError
from engine.decoding import Decoding, Grammar, Speculation
from engine.events import Done, Event, PromptProgress, Stats
from engine.prefix import common_prefix, dropped_span
from engine.prompt import fit_messages
from engine.sampling import SamplingParams

if TYPE_CHECKING:
    from engine.state_cache import StateCache

log = logging.getLogger(__name__)

PREFILL_CHUNK = 256  # prompt tokens per progress event / cancellation point


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


def read_ahead(ctx: Context, tokens: Sequence[int], cancel: threading.Event | None = None) -> int:
    """Read ``tokens``, the known beginning of a prompt to come, into ``ctx`` (keeping what it
    shares with them): the prompt then finds them cached. The part of the answer's prompt
    before a tool's result is read while the tool runs or waits for the person. Returns the
    tokens read; a cancel leaves the context as it was before the read."""
    keep = common_prefix(ctx.tokens, tokens)
    if keep == len(tokens):
        return 0
    if len(tokens) >= ctx.n_ctx:
        return 0  # the prompt will not fit either; its reply says so
    ctx.rewind(keep)
    try:
        ctx.decode(tokens[keep:], logits="none", cancel=cancel)
    except DecodeError:
        if cancel is None or not cancel.is_set():
            raise
        return 0
    return len(tokens) - keep


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
             cancel: threading.Event | None = None, *, grammar: Grammar | None = None,
             logprobs: int | None = None) -> Iterator[Event]:
        """Reply to ``messages`` (the last is the user's). Oldest turns are dropped if needed."""
        budget = self.ctx.n_ctx - min(params.max_tokens, self.ctx.n_ctx // 4)
        try:
            tokens, self.last_dropped = fit_messages(self.model, messages, budget, cancel=cancel)
        except DecodeError:
            if cancel is None or not cancel.is_set():
                raise
            return iter([Done("cancelled", "", (), Stats())])  # cancelled while fitting
        return self.complete(tokens, params, cancel, grammar=grammar, logprobs=logprobs)

    def complete(self, prompt: Sequence[int], params: SamplingParams,
                 cancel: threading.Event | None = None, *, grammar: Grammar | None = None,
                 logprobs: int | None = None) -> Iterator[Event]:
        """Continue ``prompt`` (token ids). A generator of events ending with one ``Done``.
        ``grammar``: the reply follows it (engine.constraint); ``logprobs``: report each
        token's log-probability with that many alternatives."""
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) >= self.ctx.n_ctx:
            raise ContextFullError(
                f"the prompt ({len(prompt)} tokens) does not fit the context ({self.ctx.n_ctx})")
        return self._run(list(prompt), params, cancel or threading.Event(), grammar, logprobs)

    def read_ahead(self, tokens: Sequence[int], cancel: threading.Event | None = None) -> int:
        """:func:`read_ahead` on this generator's context."""
        return read_ahead(self.ctx, tokens, cancel)

    # -- the loop -------------------------------------------------------------------------
    def _run(self, prompt: list[int], params: SamplingParams, cancel: threading.Event,
             grammar: Grammar | None, logprobs: int | None) -> Iterator[Event]:
        ctx = self.ctx
        if self.cache is not None:
            self.cache.prepare(self._contexts(), prompt)
        reuse, _, self.shift_note = align(ctx, prompt)
        d = Decoding(self.model, prompt, params, speculation=self.speculation, grammar=grammar,
                     logprobs=logprobs, n_cached=reuse)
        d.note = self.shift_note
        try:
            for done in range(reuse, len(prompt), PREFILL_CHUNK):
                ctx.decode(prompt[done:done + PREFILL_CHUNK], cancel=cancel)
                yield PromptProgress(min(done + PREFILL_CHUNK, len(prompt)) - reuse,
                                     len(prompt) - reuse)
        except DecodeError:
            if not cancel.is_set():
                raise
            d.stop("cancelled")
            yield d.finish()
            return
        d.stats.prompt_s = time.perf_counter() - d.stats.t0
        yield from d.start(ctx.logits())
        while d.reason is None:
            if cancel.is_set():
                d.stop("cancelled")
            elif ctx.n_free < 1:
                d.stop("context_full")
            else:
                tokens = d.plan(ctx.n_free - 1)
                t = time.perf_counter()
                ctx.decode(tokens, logits=d.rows)
                rows = ctx.logits_rows()
                events, keep = d.take(rows, time.perf_counter() - t)
                ctx.rewind(keep)
                yield from events
        # Keep the cache = prompt + generated tokens except the last (never decoded).
        ctx.rewind(len(prompt) + max(d.n_tokens - 1, 0))
        yield d.finish()

    def _contexts(self) -> list[Context]:
        """The target's context, and the draft model's when there is one (saved alongside)."""
        draft = self.speculation.draft_ctx if self.speculation is not None else None
        return [self.ctx] if draft is None else [self.ctx, draft]


