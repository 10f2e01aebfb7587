"""One conversation's replies on a runtime's scheduler (engine.decode.scheduler, the loop that
serves the window and the server), driven on the caller's thread: the command line, the
self-check and session resume use it (``Runtime.generator``); ``Generator.alone`` gives a context
outside any runtime a scheduler of its own (tests and benchmarks of one context).

The target context's token mirror is the conversation's cache. A new turn decodes only the
tokens past the longest common prefix with what is cached; an edit or a regenerate rewinds to
that prefix instead of starting over. When the reply ends, the cache holds the prompt and every
generated token but the last one (which was sampled, not decoded). With a ``StateCache``, a
prompt that would discard a long stretch of the context (another conversation, another version
of a reply) first saves it, and restores a saved state that shares more with the prompt.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from engine.chat.messages import Message
from engine.decode.decoding import Drafting, GrammarState
from engine.decode.sampling import SamplingParams
from engine.decode.scheduler import Job, Scheduler
from engine.errors import ContextFullError, DecodeError
from engine.events import Done, Event, Stats
from engine.llama.abort import Cancel
from engine.llama.context import LlamaSequence
from engine.prompts.completion import completion_turn
from engine.prompts.request import Chat, Policy, prepare

if TYPE_CHECKING:
    from engine.cache.state_cache import StateCache
    from engine.prompts.attachments import Source


class Generator:
    """Streams replies for one conversation on ``ctx`` (owned by one thread)."""

    def __init__(self, scheduler: Scheduler) -> None:
        """``scheduler``: a runtime's (engine.runtime.runtime), driven on the caller's thread;
        its sequence 0 is the conversation's."""
        slot = scheduler.slots[0]
        self.ctx = slot.ctx
        self.model = slot.ctx.model
        self.speculation = slot.speculation
        self.cache = scheduler.cache  # saved states of other conversations and reply versions
        self.scheduler = scheduler
        self.last_dropped = 0  # messages the last ``chat`` left out to fit the context
        self.last_sources: tuple[Source, ...] = ()  # what the last ``chat`` showed of its files
        self.shift_note: str | None = None  # why the last reply could not shift the cache

    @classmethod
    def alone(cls, ctx: LlamaSequence, speculation: Drafting | None = None,
              cache: StateCache | None = None) -> Generator:
        """A one-slot scheduler over ``ctx``, outside any runtime and pool (tests and
        benchmarks of one context): nothing else decodes on it, and no pool's rule
        (engine.runtime.cores) holds it back."""
        return cls(Scheduler((ctx,), [speculation], cache))

    def chat(self, messages: Sequence[Message], params: SamplingParams,
             cancel: threading.Event | None = None, *, grammar: GrammarState | None = None,
             logprobs: int | None = None) -> Iterator[Event]:
        """Reply to ``messages`` (the last is the user's). Oldest turns are dropped if needed.
        A model without a chat template (a base model) continues them as one text instead
        (engine.prompts.completion), as the window does."""
        try:
            turn = prepare(self.model, Chat(tuple(messages), params), Policy(self.ctx.n_ctx), cancel) \
                if self.model.chat_template is not None else \
                completion_turn(self.model, messages, params, self.ctx.n_ctx)
        except DecodeError:
            if cancel is None or not cancel.is_set():
                raise
            return iter([Done("cancelled", "", (), Stats())])  # cancelled while fitting
        self.last_dropped = turn.dropped
        self.last_sources = turn.sources
        return self.complete(turn.prompt, params, cancel, grammar=grammar, logprobs=logprobs)

    def complete(self, prompt: Sequence[int], params: SamplingParams,
                 cancel: threading.Event | None = None, *, grammar: GrammarState | None = None,
                 logprobs: int | None = None) -> Iterator[Event]:
        """Continue ``prompt`` (token ids). A generator of events ending with one ``Done``.
        ``grammar``: the reply follows it (engine.decode.constraint); ``logprobs``: report each
        token's log-probability with that many alternatives."""
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) >= self.ctx.n_ctx:
            raise ContextFullError(
                f"the prompt ({len(prompt)} tokens) does not fit the context ({self.ctx.n_ctx})")
        job = Job(list(prompt), params, lambda _: None, cancel=cancel or Cancel(),
                  grammar=grammar, logprobs=logprobs, slot=0)
        return self._run(job)

    def read_ahead(self, tokens: Sequence[int], cancel: threading.Event | None = None) -> int:
        """Read ``tokens``, the known start of a prompt to come, into the context
        (engine.decode.scheduler.Scheduler.read_ahead); how many it holds now."""
        return self.scheduler.read_ahead(0, tokens, cancel)

    def _run(self, job: Job) -> Iterator[Event]:
        """The scheduler's steps for ``job`` alone, its events yielded as they come."""
        events: deque[object] = deque()
        job.emit = events.append
        self.scheduler.add(job)
        ended = False
        try:
            while True:
                self.scheduler.step()
                while events:
                    item = events.popleft()
                    if isinstance(item, Exception):
                        ended = True
                        raise item
                    if isinstance(item, Done):
                        ended = True
                        self.shift_note = item.note
                        yield item
                        return
                    yield item  # type: ignore[misc]
        finally:  # a reply left unread stops here, its cache cut back as for a cancel (the
            if not ended:  # caller's cancel event is left as it was: it may serve other replies)
                self.scheduler.abandon(job)
