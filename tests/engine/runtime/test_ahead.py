"""Reading a prompt ahead while it is typed (engine.runtime.ahead) on the real 0.5B, whose
K-quant kernels are the ones exact decoding makes batch-invariant: the reply after reading ahead
is token for token the reply read at send, the prompt finds what was read, a new prompt keeps
what it shares with the old, and a reply that arrives is never held behind the reading."""

from __future__ import annotations

import threading

import pytest

from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.events import Done
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.ahead import ReadAhead
from engine.runtime.runtime import Runtime, RuntimeConfig
from engine.runtime.service import Engine, Job
from tests.conftest import REPLY_WAIT_S, model_path

GREEDY = SamplingParams(temperature=0, max_tokens=24)
PASTE = "\n".join(f"def f{i}(x):\n    return x * {i} + {i * i}  # step {i}" for i in range(60))
QUESTION = "Which of these functions returns 2003 for x equal to 10? Answer with its name only."


def engine(path, n_parallel: int = 1) -> Engine:
    rt = Runtime(RuntimeConfig(target=ModelSpec(path),
                               context=ContextParams(n_ctx=4096, n_parallel=n_parallel),
                               speculative=SpeculativeParams(drafter="none"), kv_store_bytes=0))
    return Engine(rt, reserved=1 if n_parallel > 1 else 0)


class Watch:
    """``on_read``'s figures; ``until(n)`` waits for the sequence to hold all ``n`` tokens of
    the prompt of ``n`` tokens."""

    def __init__(self) -> None:
        self.figures: list[tuple[int, int]] = []
        self._changed = threading.Condition()

    def __call__(self, held: int, total: int) -> None:
        with self._changed:
            self.figures.append((held, total))
            self._changed.notify_all()

    def until(self, held: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: (held, held) in self.figures, REPLY_WAIT_S)


class Reply:
    """A job's events: ``emit`` collects them, ``done()`` waits for its Done."""

    def __init__(self) -> None:
        self.got: list = []
        self.ended = threading.Event()

    def emit(self, item) -> None:
        self.got.append(item)
        if isinstance(item, (Done, Exception)):
            self.ended.set()

    def done(self) -> Done:
        assert self.ended.wait(REPLY_WAIT_S)
        assert isinstance(self.got[-1], Done), self.got[-1]
        return self.got[-1]


def reply(eng: Engine, prompt: list[int], slot: int | None = 0) -> Done:
    r = Reply()
    eng.submit(Job(prompt, GREEDY, r.emit, slot=slot))
    return r.done()


@pytest.fixture(scope="module")
def draft_path():
    return model_path("draft")


@pytest.fixture(scope="module")
def prompts(draft_path):
    """The whole message's prompt, and the prompts of the message as it was being typed."""
    with Runtime(RuntimeConfig(target=ModelSpec(draft_path), kv_store_bytes=0)) as rt:
        def prompt(text: str) -> list[int]:
            return chat_tokens(rt.target, [Message("user", text)])
        words = QUESTION.split()
        typed = [prompt(f"{PASTE}\n\n{' '.join(words[:n])}") for n in (0, 4, len(words) - 1)]
        return prompt(f"{PASTE}\n\n{QUESTION}"), typed


@pytest.fixture(scope="module")
def at_send(draft_path, prompts):
    """The reply read at send, on an engine that read nothing before."""
    eng = engine(draft_path)
    try:
        return reply(eng, prompts[0])
    finally:
        eng.close()


def test_the_reply_after_reading_ahead_is_the_reply_read_at_send(draft_path, prompts, at_send):
    full, typed = prompts
    watch = Watch()
    eng = engine(draft_path)
    try:
        ahead = ReadAhead(eng, 0, on_read=watch)
        for p in typed:  # the message grows: each prompt replaces the one before
            ahead.want(p)
        watch.until(len(typed[-1]))
        ahead.stop()
        done = reply(eng, full)
    finally:
        eng.close()
    assert done.token_ids == at_send.token_ids and done.text == at_send.text
    shared = next(i for i, (a, b) in enumerate(zip(full, typed[-1], strict=False)) if a != b)
    assert done.stats.n_cached_tokens >= shared > len(full) - 12  # only the last words read at send
    assert at_send.stats.n_cached_tokens == 0


def test_a_new_prompt_keeps_what_it_shares_and_a_stopped_one_reads_no_more(draft_path, prompts):
    full, typed = prompts
    watch = Watch()
    eng = engine(draft_path)
    try:
        ahead = ReadAhead(eng, 0, on_read=watch)
        ahead.want(typed[0])
        watch.until(len(typed[0]))
        before = ahead.read
        ahead.want(typed[1])
        watch.until(len(typed[1]))
        assert ahead.read - before <= len(typed[1]) - len(typed[0]) + 8  # the paste is not read again
        ahead.stop()
        watch.figures.clear()
        ahead.want(typed[0])  # the words deleted: cut back, nothing read
        watch.until(len(typed[0]))
        assert eng.runtime.ctx.tokens == typed[0]
    finally:
        eng.close()


def test_a_reply_that_arrives_stops_the_reading_and_the_reading_goes_on_after(smol_path):
    """A server's request on another sequence: it runs at once (the step under way is
    dropped), and the prompt is read to its end afterwards."""
    eng = engine(smol_path, n_parallel=2)
    try:
        rt = eng.runtime
        long_prompt = chat_tokens(rt.target, [Message("user", PASTE)])
        assert len(long_prompt) < rt.ctx.n_ctx
        other = chat_tokens(rt.target, [Message("user", "Name a river.")])
        watch = Watch()
        ahead = ReadAhead(eng, 0, step=16, on_read=watch)
        request = Reply()
        real = rt.ctx.sequences[0].decode
        calls = []

        def first_step_starts(*a, **kw):  # the request comes as the reading's first step starts
            if not calls:
                eng.submit(Job(other, GREEDY, request.emit, slot=None))
            calls.append(1)
            return real(*a, **kw)

        rt.ctx.sequences[0].decode = first_step_starts
        ahead.want(long_prompt)
        done = request.done()
        assert done.reason in ("stop", "length") and done.token_ids
        watch.until(len(long_prompt))
        assert rt.ctx.sequences[0].tokens == long_prompt
    finally:
        eng.close()


@pytest.mark.parametrize("sent", ["the message", "another message"])
def test_the_message_sent_while_its_start_is_read_lets_that_step_finish(smol_path, sent):
    """Enter while a step reads the start of the message's own prompt: the step ends (its
    tokens are the reply's first), where any other arrival, here another message on the same
    sequence, stops it at once and its tokens are read again by the reply."""
    eng = engine(smol_path)
    try:
        rt = eng.runtime
        typed = chat_tokens(rt.target, [Message("user", PASTE)])
        other = chat_tokens(rt.target, [Message("user", "Name a river.")])
        final = typed if sent == "the message" else other
        ahead = ReadAhead(eng, 0, step=len(typed))  # one step reads it all
        answer = Reply()
        real = rt.ctx.sequences[0].decode
        calls = []

        def enter_as_it_starts(tokens, *a, **kw):  # Enter arrives as the step starts decoding
            if not calls:
                eng.submit(Job(final, GREEDY, answer.emit, slot=0))
            calls.append(len(tokens))
            return real(tokens, *a, **kw)

        rt.ctx.sequences[0].decode = enter_as_it_starts
        ahead.want(typed)
        done = answer.done()
        assert done.reason in ("stop", "length"), done
        if sent == "the message":
            assert ahead.read == len(typed)
            assert done.stats.n_cached_tokens == len(typed) - 1  # its last token: for logits
        else:
            assert ahead.read == 0
            assert done.stats.n_cached_tokens < len(other)
    finally:
        eng.close()


def test_idle_work_added_first_while_another_runs_is_kept(smol_path):
    """Work added at the head of the engine's idle work while another idle step runs (a
    typed prompt while the local server's grammar build ran) runs too: the step that ended
    removed itself, not the newcomer (which left reading ahead queued for ever)."""
    eng = engine(smol_path)
    try:
        ran = threading.Event()
        steps: list[str] = []

        def newcomer() -> bool:
            steps.append("newcomer")
            ran.set()
            return False

        def first() -> bool:
            steps.append("first")
            eng.add_idle(newcomer, first=True)
            return False

        eng.add_idle(first)
        assert ran.wait(REPLY_WAIT_S)
        assert steps == ["first", "newcomer"]
    finally:
        eng.close()
