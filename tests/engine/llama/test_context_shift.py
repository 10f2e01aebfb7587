"""Long chats: dropping the oldest turns shifts the KV cache instead of recomputing the rest.

Real SmolLM2 with a small context. ``LlamaSequence.drop`` keeps llama.cpp's cache and the token
mirror together; the generator recognises a prompt whose oldest turns were dropped and
decodes only the new tail; the draft model's context follows the same way.
"""

from __future__ import annotations

from engine.cache.prefix import dropped_span
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.events import Done, Token
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.runtime.generate import Generator

GREEDY = SamplingParams(temperature=0, max_tokens=8)
SYSTEM = Message("system", "You are a terse assistant. Answer in a few words.", 0.0)
TOPICS = ["the sea", "mountains", "rivers", "deserts", "forests", "cities", "islands", "caves",
          "glaciers", "volcanoes", "lakes", "plains"]


def turn(i: int) -> list[Message]:
    t = TOPICS[i % len(TOPICS)]
    return [Message("user", f"Tell me one short fact about {t}, please, in one sentence.", 0.0),
            Message("assistant", f"Here is one short fact about {t}: they are found on Earth "
                    f"and people have written about {t} for a very long time.", 0.0)]


def history(first: int, last: int) -> list[Message]:
    return [SYSTEM] + [m for i in range(first, last) for m in turn(i)]


def run(gen: Generator, prompt: list[int]) -> Done:
    events = list(gen.complete(prompt, GREEDY))
    assert isinstance(events[-1], Done)
    return events[-1]


def test_drop_removes_a_span_and_shifts_the_rest(smol) -> None:
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as ctx:
        tokens = chat_tokens(smol, history(0, 3))
        ctx.decode(tokens)
        assert ctx.drop(10, 40)
        assert ctx.tokens == tokens[:10] + tokens[40:]
        assert ctx.kv_pos_max() == ctx.n_past - 1  # llama.cpp agrees with the mirror
        ctx.decode([tokens[0]])  # the freed room is usable
        assert ctx.n_past == len(tokens) - 30 + 1 and ctx.kv_pos_max() == ctx.n_past - 1
        assert ctx.drop(5, 5) and ctx.n_past == len(tokens) - 29
        for bad in ((-1, 3), (4, 2), (0, ctx.n_past + 1)):
            try:
                ctx.drop(*bad)
            except ValueError:
                continue
            raise AssertionError(f"drop{bad} was accepted")


def test_dropped_span_finds_the_removed_turns() -> None:
    cached = [1, 2, 3] + list(range(100, 140)) + list(range(200, 240))
    prompt = [1, 2, 3] + list(range(200, 240)) + [7, 8]
    assert dropped_span(cached, prompt) == (3, 40, 40)
    assert dropped_span(cached, cached[:50] + [9]) is None  # an ordinary edit: just rewind
    assert dropped_span(cached, [1, 2, 3] + list(range(200, 205))) is None  # too little kept


def test_a_shifted_cache_answers_like_a_fresh_prefill_and_decodes_only_the_tail(smol) -> None:
    full = chat_tokens(smol, history(0, 6))
    question = Message("user", "And one fact about the moon?", 0.0)
    dropped = chat_tokens(smol, history(2, 6) + [question])  # the two oldest turns left out
    with LlamaSequence(smol, ContextParams(n_ctx=512, n_threads=1)) as ctx, \
            LlamaSequence(smol, ContextParams(n_ctx=512, n_threads=1)) as fresh:
        gen = Generator.alone(ctx)
        run(gen, full)
        shifted = run(gen, dropped)
        cold = run(Generator.alone(fresh), dropped)
        system_len = dropped_span(full, dropped)[0]
        tail = len(chat_tokens(smol, history(2, 6) + [question])) - \
            len(chat_tokens(smol, history(2, 6), add_generation_prompt=False))
        s = shifted.stats
        assert s.n_prompt_tokens - s.n_cached_tokens <= tail  # only the new message decoded
        assert s.n_cached_tokens > system_len + 100  # the kept turns were shifted, not redone
        assert ctx.kv_pos_max() == ctx.n_past - 1
        assert shifted.token_ids[:4] == cold.token_ids[:4], (shifted.text, cold.text)


def test_a_chat_three_times_longer_than_the_context_keeps_answering(smol) -> None:
    params = SamplingParams(temperature=0, max_tokens=6)
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as ctx:
        gen = Generator.alone(ctx)
        messages = [SYSTEM]
        recomputed = []
        for i in range(16):
            user, answer = turn(i)
            messages.append(user)
            done = list(gen.chat(messages, params))[-1]
            assert isinstance(done, Done) and done.reason in ("stop", "length")
            messages.append(answer)  # a fixed answer: the history grows fast, alike each run
            if gen.last_dropped:
                s = done.stats
                recomputed.append(s.n_prompt_tokens - s.n_cached_tokens)
        assert len(chat_tokens(smol, messages)) > 3 * 256
        assert len(recomputed) >= 5
        # each overflowing turn decodes the last answer and the new message, never the whole
        # kept history (about 200 tokens)
        assert max(recomputed) < 100, recomputed


def test_the_draft_context_drops_the_same_turns(smol) -> None:
    from engine.decode.sampling import Sampler
    from engine.decode.speculative.draft_model import ModelDrafter

    full = chat_tokens(smol, history(0, 5))
    dropped = chat_tokens(smol, history(2, 5) + [Message("user", "Why?", 0.0)])
    with LlamaSequence(smol, ContextParams(n_ctx=512, n_threads=1)) as dctx:
        drafter = ModelDrafter(dctx, p_min=0.0)
        drafter.propose(full, 2, Sampler(GREEDY))
        kept = dropped_span(dctx.tokens, dropped)
        assert kept is not None
        decoded = []
        real = dctx.decode
        dctx.decode = lambda toks, **kw: (decoded.append(len(toks)), real(toks, **kw))[1]
        drafter.propose(dropped, 2, Sampler(GREEDY))
        assert decoded[0] < 40  # the tail only, not the kept turns
        assert dctx.tokens[:len(dropped)] == dropped and dctx.kv_pos_max() == dctx.n_past - 1


def _tokens(events) -> list[Token]:
    return [e for e in events if isinstance(e, Token)]


def test_each_step_marks_its_last_token(smol) -> None:
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as ctx:
        toks = _tokens(Generator.alone(ctx).chat(history(0, 1), GREEDY))
    assert toks and all(t.step_end for t in toks)  # one token per step without a drafter
