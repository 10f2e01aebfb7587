"""Parallel sequences on one context (the real SmolLM2): several replies per llama_decode, each
the reply it would be alone, with its own cancel, limits and cache."""

from __future__ import annotations

import threading

import pytest

from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.events import Done, Token
from engine.llama import context as context_module
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig
from engine.runtime.service import Engine, Job
from tests.conftest import REPLY_WAIT_S

QUESTIONS = ["Name three rivers.", "What is a prime number?", "Write a haiku about snow.",
             "How do bees make honey?"]
GREEDY = SamplingParams(temperature=0, max_tokens=40)


def runtime(path, n_parallel=4, drafter="none", n_ctx=512):
    """A runtime without the disk KV store: each reads its prompts itself (one with one
    sequence and one with four lay out their caches alike, so one would restore the other's)."""
    return Runtime(RuntimeConfig(target=ModelSpec(path),
                                 context=ContextParams(n_ctx=n_ctx, n_parallel=n_parallel),
                                 speculative=SpeculativeParams(drafter=drafter, adaptive=False),
                                 kv_store_bytes=0))


class Reply:
    """A job's events, and an event set when its Done (or error) arrives."""

    def __init__(self, prompt, params=GREEDY, **kw) -> None:
        self.events: list = []
        self.ended = threading.Event()
        self.job = Job(list(prompt), params, self._emit, **kw)

    def _emit(self, item) -> None:
        self.events.append(item)
        if isinstance(item, (Done, Exception)):
            self.ended.set()

    @property
    def done(self) -> Done:
        assert self.ended.wait(REPLY_WAIT_S)
        assert isinstance(self.events[-1], Done), self.events[-1]
        return self.events[-1]


@pytest.fixture(scope="module")
def alone(smol_path):
    """Each question's greedy reply, decoded alone."""
    with runtime(smol_path, n_parallel=1) as rt:
        prompts = [chat_tokens(rt.target, [Message("user", q)]) for q in QUESTIONS]
        out = []
        for p in prompts:
            events = list(rt.generator.complete(p, GREEDY))
            out.append(events[-1])
        return prompts, out


@pytest.fixture
def batches(monkeypatch):
    """The parts of every llama_decode the scheduler makes: [[n_tokens of each part], ...]."""
    seen: list[list[int]] = []
    real = context_module.decode_batch

    def spy(parts, cancel=None):
        seen.append([len(p.tokens) for p in parts])
        return real(parts, cancel)

    monkeypatch.setattr("engine.decode.scheduler.decode_batch", spy)
    return seen


def test_four_replies_share_each_pass_and_are_the_replies_they_would_be_alone(smol_path, alone, same_tokens,
                                                                              batches):
    prompts, solo = alone
    with runtime(smol_path) as rt:
        gate = threading.Event()  # the engine's first round waits: the four are queued by then
        engine = Engine(rt, gate=gate)
        replies = [Reply(p) for p in prompts]
        for r in replies:
            engine.submit(r.job)
        gate.set()
        for r, want, p in zip(replies, solo, prompts):
            same_tokens(rt.target, p, r.done.token_ids, want.token_ids)
        engine.close()
    assert max(len(b) for b in batches) == 4  # four sequences in one llama_decode
    assert len(batches) < sum(len(d.token_ids) for d in solo)


def test_a_cancelled_reply_frees_its_slot_and_leaves_the_others_alone(smol_path, alone, same_tokens):
    prompts, solo = alone
    with runtime(smol_path, n_parallel=2) as rt:
        engine = Engine(rt)
        stopped = Reply(prompts[0], SamplingParams(temperature=0, max_tokens=400))
        others = [Reply(p) for p in prompts[1:]]

        def emit(item, inner=stopped._emit):
            inner(item)
            if isinstance(item, Token):
                stopped.job.cancel.set()  # as its first token arrives: the reply is under way

        stopped.job.emit = emit
        engine.submit(stopped.job)
        for r in others:
            engine.submit(r.job)
        assert stopped.done.reason == "cancelled"
        for r, want, p in zip(others, solo[1:], prompts[1:]):  # three replies through 1 free slot
            same_tokens(rt.target, p, r.done.token_ids, want.token_ids)
        assert engine.stats()["cancelled"] == 1 and engine.stats()["completed"] == 3
        engine.close()


def test_a_new_prompt_is_read_in_slices_while_another_reply_streams(smol_path, batches, monkeypatch):
    monkeypatch.setattr("engine.decode.scheduler.SHARED_SLICE_S", 0.0)  # the 135M reads fast: slices of 128
    with runtime(smol_path, n_parallel=2, n_ctx=1024) as rt:
        engine = Engine(rt)
        streaming = Reply(chat_tokens(rt.target, [Message("user", QUESTIONS[0])]),
                          SamplingParams(temperature=0, max_tokens=120))
        long_prompt = chat_tokens(rt.target, [Message("user", "word " * 400 + QUESTIONS[1])])
        late = Reply(long_prompt)
        inner = streaming._emit

        def emit(item) -> None:  # the long prompt comes with the reply's first token
            inner(item)
            if isinstance(item, Token) and sum(isinstance(e, Token) for e in streaming.events) == 1:
                engine.submit(late.job)

        streaming.job.emit = emit
        engine.submit(streaming.job)
        assert late.done.reason in ("stop", "length") and streaming.done.stats.n_tokens > 0
        engine.close()
    from engine.decode.scheduler import PREFILL_SHARED

    mixed = [b for b in batches if len(b) == 2]
    assert mixed and all(b[1] <= PREFILL_SHARED for b in mixed)  # slices beside the stream


def test_a_reply_at_its_context_limit_ends_alone(smol_path, alone):
    prompts, solo = alone
    with runtime(smol_path, n_parallel=2, n_ctx=128) as rt:
        engine = Engine(rt)
        long = Reply(prompts[2], SamplingParams(temperature=0, max_tokens=400))
        short = Reply(prompts[1], SamplingParams(temperature=0, max_tokens=10))
        engine.submit(long.job)
        engine.submit(short.job)
        assert long.done.reason == "context_full" and short.done.reason in ("stop", "length")
        engine.close()


def test_a_conversation_goes_back_to_the_slot_that_holds_it(smol_path, alone):
    prompts, _ = alone
    with runtime(smol_path, n_parallel=2) as rt:
        engine = Engine(rt)
        first = Reply(prompts[0])
        engine.submit(first.job)
        reply = first.done
        other = Reply(prompts[1])
        engine.submit(other.job)
        assert other.done.reason
        follow = list(prompts[0]) + list(reply.token_ids) + \
            rt.target.tokenize("\nAnd two more?", add_special=False, parse_special=False)
        again = Reply(follow)
        engine.submit(again.job)
        assert again.done.stats.n_cached_tokens >= len(prompts[0])
        engine.close()


def test_a_pinned_job_waits_for_its_slot_and_others_never_take_it(smol_path, alone):
    prompts, _ = alone
    with runtime(smol_path, n_parallel=2) as rt:
        engine = Engine(rt, reserved=1)
        pinned = Reply(prompts[0], slot=0)
        free = [Reply(p) for p in prompts[1:3]]
        for r in (*free, pinned):
            engine.submit(r.job)
        assert pinned.done.reason
        for r in free:
            assert r.done.reason
        assert rt.ctx.sequences[0].tokens[:len(prompts[0])] == list(prompts[0])
        assert engine.scheduler.slots[1].ctx.n_past > 0
        engine.close()


def test_ngram_drafts_in_a_batch_keep_each_reply_exact(smol_path, alone, same_tokens):
    prompts, solo = alone
    with runtime(smol_path, drafter="ngram") as rt:
        engine = Engine(rt)
        replies = [Reply(p) for p in prompts]
        for r in replies:
            engine.submit(r.job)
        for r, want, p in zip(replies, solo, prompts):
            same_tokens(rt.target, p, r.done.token_ids, want.token_ids)
        engine.close()


def test_the_runtime_owns_the_one_scheduler_and_one_driver_drives_it(smol_path):
    """The command line's generator and the window's and server's Engine drive the runtime's
    scheduler; once an Engine's thread drives it, the caller's thread may not."""
    with runtime(smol_path, n_parallel=2) as rt:
        assert rt.generator.scheduler is rt.scheduler
        prompt = chat_tokens(rt.target, [Message("user", QUESTIONS[0])])
        first = list(rt.generator.complete(prompt, GREEDY))[-1]
        engine = Engine(rt)
        try:
            assert engine.scheduler is rt.scheduler
            with pytest.raises(RuntimeError, match="an Engine drives"):
                rt.generator.complete(prompt, GREEDY)
            with pytest.raises(RuntimeError, match="another Engine"):
                Engine(rt)
            reply = Reply(prompt)
            engine.submit(reply.job)
            assert reply.done.token_ids == first.token_ids  # the same sequence, the same cells
        finally:
            engine.close()


def test_a_prefix_another_sequence_holds_is_copied_not_read_again(smol_path, same_tokens):
    rules = "You answer in one short sentence. " + "Be exact and plain; never guess. " * 20
    prompts = []
    with runtime(smol_path, n_parallel=1) as rt:
        for q in QUESTIONS[:2]:
            prompts.append(chat_tokens(rt.target, [Message("system", rules), Message("user", q)]))
        solo = [list(rt.generator.complete(p, GREEDY))[-1] for p in prompts]
    shared = next(i for i, (a, b) in enumerate(zip(*prompts)) if a != b)
    assert shared > 150
    with runtime(smol_path, n_parallel=2) as rt:
        engine = Engine(rt, reserved=1)  # the first job runs in sequence 0, the second in 1
        first = Reply(prompts[0], slot=0)
        engine.submit(first.job)
        same_tokens(rt.target, prompts[0], first.done.token_ids, solo[0].token_ids)
        held = list(rt.ctx.sequences[0].tokens)
        second = Reply(prompts[1])
        engine.submit(second.job)
        assert second.done.stats.n_cached_tokens == shared  # the rules came from sequence 0
        same_tokens(rt.target, prompts[1], second.done.token_ids, solo[1].token_ids)
        assert rt.ctx.sequences[0].tokens == held  # the lender keeps what it held...
        assert rt.ctx.sequences[0].kv_pos_max() == len(held) - 1
        again = Reply(prompts[0], slot=0)  # ...and reuses it whole
        engine.submit(again.job)
        assert again.done.stats.n_cached_tokens == len(prompts[0]) - 1
        same_tokens(rt.target, prompts[0], again.done.token_ids, solo[0].token_ids)
        engine.close()


def _together(rt, prompts, cancel_first_after=None):
    """The scheduler alone, stepped on this thread: every job is admitted in the same step."""
    sched = rt.scheduler
    replies = [Reply(p) for p in prompts]
    for r in replies:
        sched.add(r.job)
    steps = 0
    while sched.step():
        steps += 1
        if steps == cancel_first_after:
            replies[0].job.cancel.set()
    return replies


def test_prompts_that_start_the_same_read_their_start_once(smol_path, same_tokens):
    """Parallel requests with one long system prompt, arriving together: one sequence reads the
    shared start, the others wait for it and copy its cells; each reads its own end."""
    from engine.decode.scheduler import PREFILL_ALONE

    rules = "You answer in one short sentence. " + "Be exact and plain; never guess. " * 70
    with runtime(smol_path, n_parallel=1, n_ctx=2048) as rt:
        prompts = [chat_tokens(rt.target, [Message("system", rules), Message("user", q)])
                   for q in QUESTIONS]
        solo = [list(rt.generator.complete(p, GREEDY))[-1] for p in prompts]
    shared = min(next(i for i, (a, b) in enumerate(zip(prompts[0], p)) if a != b) for p in prompts[1:])
    assert shared > 2 * PREFILL_ALONE
    with runtime(smol_path, n_parallel=4, n_ctx=4096) as rt:
        replies = _together(rt, prompts)
        for r, want, p in zip(replies, solo, prompts):
            same_tokens(rt.target, p, r.done.token_ids, want.token_ids)
    cached = [r.done.stats.n_cached_tokens for r in replies]
    # the first read it all; each other copied all but less than one slice of it
    assert cached[0] == 0 and all(shared - PREFILL_ALONE < c <= shared for c in cached[1:])


def test_a_prompt_waiting_on_another_reads_on_when_that_one_is_cancelled(smol_path, same_tokens):
    rules = "Be exact and plain; never guess. " * 60
    with runtime(smol_path, n_parallel=1, n_ctx=2048) as rt:
        prompts = [chat_tokens(rt.target, [Message("system", rules), Message("user", q)])
                   for q in QUESTIONS[:2]]
        want = list(rt.generator.complete(prompts[1], GREEDY))[-1]
    with runtime(smol_path, n_parallel=2, n_ctx=4096) as rt:
        first, second = _together(rt, prompts, cancel_first_after=1)
        assert first.done.reason == "cancelled"
        same_tokens(rt.target, prompts[1], second.done.token_ids, want.token_ids)
        assert 0 < second.done.stats.n_cached_tokens < len(prompts[1]) - 1  # copied, then read on


def test_a_schema_reply_beside_another_asks_no_logits_for_its_forced_tokens(smol_path, alone, same_tokens,
                                                                            monkeypatch):
    from engine.decode.constraint import Grammar
    from engine.runtime.generate import Generator

    schema = {"type": "object", "required": ["rivers"], "additionalProperties": False,
              "properties": {"rivers": {"type": "array", "maxItems": 3, "items": {
                  "type": "object", "required": ["name", "continent"], "additionalProperties": False,
                  "properties": {"name": {"type": "string"}, "continent": {"type": "string"}}}}}}
    prompts, solo = alone
    asked: list[tuple[int, object]] = []
    real = context_module.decode_batch

    def spy(parts, cancel=None):
        asked.extend((len(p.tokens), p.logits) for p in parts if len(p.tokens) > 1)
        return real(parts, cancel)

    with runtime(smol_path, n_parallel=2) as rt:
        grammar = Grammar.compile(rt.target, "json_schema", schema)
        alone = Generator.alone(rt.ctx.sequences[1])
        by_itself = list(alone.complete(prompts[0], GREEDY, grammar=grammar.matcher()))[-1]
        monkeypatch.setattr("engine.decode.scheduler.decode_batch", spy)
        gate = threading.Event()  # the engine's first round waits: both are queued by then
        engine = Engine(rt, gate=gate)
        shaped, other = Reply(prompts[0], grammar=grammar.matcher()), Reply(prompts[1])
        engine.submit(shaped.job)
        engine.submit(other.job)
        gate.set()
        same_tokens(rt.target, prompts[0], shaped.done.token_ids, by_itself.token_ids)
        same_tokens(rt.target, prompts[1], other.done.token_ids, solo[1].token_ids)
        engine.close()
    assert shaped.done.stats.drafters_used.get("grammar", 0) > 0
    forced_passes = [(n, rows) for n, rows in asked if isinstance(rows, int) and rows < n]
    assert forced_passes and all(rows == 1 for _, rows in forced_passes)


def test_slices_beside_streaming_replies_grow_with_the_measured_reading_rate() -> None:
    from engine.decode.scheduler import PREFILL_SHARED, SHARED_SLICE_S, shared_slice

    assert shared_slice(None) == PREFILL_SHARED  # nothing measured yet
    assert shared_slice(1 / 100) == PREFILL_SHARED  # a slow CPU: never below the slice of 128
    assert shared_slice(1 / 20000) == int(SHARED_SLICE_S * 20000)  # a GPU: what it reads meanwhile


def test_what_passes_cost_is_followed_only_on_passes_a_reply_had_to_itself(smol_path, alone):
    """The tracked curve (engine.decode.speculative.controller.CostTrack) hears a pass's time only
    where nothing else was in it: a pass shared with another reply or a prompt's slice costs
    what its whole batch costs, not what this reply's tokens would alone."""
    prompts, _ = alone
    with runtime(smol_path, n_parallel=2, drafter="ngram") as rt:
        heard: list[list[int]] = [[], []]
        for i, spec in enumerate(rt.speculations):
            assert spec is not None and spec.track is not None
            real = spec.track.observe
            spec.track.observe = lambda n, s, real=real, i=i: (heard[i].append(n), real(n, s))[1]
        engine = Engine(rt)
        first = Reply(prompts[0], slot=0)
        engine.submit(first.job)
        passes = first.done.stats.target_passes
        lone = len(heard[0])
        assert lone == passes - 1 and 1 in heard[0]  # every pass after the prompt's, plain steps too
        together = [Reply(prompts[1], slot=0), Reply(prompts[2], slot=1)]
        # submitted on the engine's thread between two rounds: the next round admits both
        engine.call(lambda: [engine.submit(r.job) for r in together]).result(REPLY_WAIT_S)
        shared = sum(r.done.stats.target_passes - 1 for r in together)
        engine.close()
    assert len(heard[0]) - lone + len(heard[1]) < shared  # the passes they shared were not heard
