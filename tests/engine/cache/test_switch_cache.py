"""The generator with a StateCache, on the app's path (a conversation tree, ``Generator.chat``):
switching to another version of a reply, or to another conversation, restores its saved state
and prefills only the new tokens; a restore that fails re-prefills with the same reply; the
draft model's context is restored alongside."""

from __future__ import annotations

import pytest

from engine.cache.state_cache import MIN_SAVE, StateCache
from engine.chat.fit import chat_tokens
from engine.conversation.tree import Conversation
from engine.decode.sampling import SamplingParams
from engine.events import Done, Stats
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.runtime.generate import Generator

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
SYSTEM = "You are a helpful travel guide."
Q1 = "Tell me about the sea: what should a visitor know first?"
V1 = ("About the sea: go early in the morning, when the water is calm and the beaches are "
      "empty; bring water, a hat and a map; ask the fishermen about the tides and the currents, "
      "which change from one bay to the next; swim only where others swim; and leave every "
      "place as clean as you found it. The harbour market opens at six.")
V2 = ("A different answer: the sea is best seen from the cliffs to the north, where a path "
      "runs for ten kilometres between the lighthouse and the old fort; walk it in spring, "
      "when the wild flowers are out, and stop at the cafe by the fort for fish soup. The "
      "path is steep in places, so wear good shoes and start before noon.")
Q2 = "Which beach is the quietest?"
Q3 = "And where should I stay?"


@pytest.fixture
def ctx(smol):
    with LlamaSequence(smol, ContextParams(n_ctx=1024, n_threads=1)) as c:
        yield c


def _answer(gen: Generator, conv: Conversation, question: str) -> Done:
    conv.add_user(question)
    conv.begin_reply()
    done = list(gen.chat(conv.engine_messages(), GREEDY))[-1]
    conv.finish_reply(done)
    return done


def _version(conv: Conversation, text: str, index: int | None = None) -> None:
    """A reply (or a new version of reply ``index``) with a fixed text."""
    conv.begin_reply(index)
    conv.finish_reply(Done("stop", text, (), Stats()))


def _two_versions(gen: Generator) -> Conversation:
    """Q1, then V1 and Q2 answered; then V2 as a new version of reply 2 with Q2 answered."""
    conv = Conversation()
    conv.add_user(Q1, system_prompt=SYSTEM)
    _version(conv, V1)
    _answer(gen, conv, Q2)
    _version(conv, V2, index=2)
    _answer(gen, conv, Q2)  # V1's branch (more than MIN_SAVE tokens) is saved on the way out
    return conv


def _new_tokens(model, conv: Conversation, done: Done) -> int:
    """Tokens of the last prompt after what the branch's last answer already held."""
    before = conv.engine_messages()[:-3]  # up to the previous question
    return done.stats.n_prompt_tokens - len(chat_tokens(model, before))


def test_switching_versions_prefills_only_the_new_tokens(smol, ctx) -> None:
    cache = StateCache(64 << 20)
    gen = Generator.alone(ctx, cache=cache)
    conv = _two_versions(gen)
    assert len(smol.tokenize(V1, add_special=False)) > MIN_SAVE
    assert cache.stats.saves == 1 and cache.stats.restores == 0

    assert conv.switch(2, -1)  # back to V1 and its answer
    done = _answer(gen, conv, Q3)
    assert cache.stats.restores == 1
    shared = len(chat_tokens(smol, conv.engine_messages()[:2]))  # system + Q1, kept anyway
    recomputed = done.stats.n_prompt_tokens - done.stats.n_cached_tokens
    assert done.stats.n_cached_tokens > shared + MIN_SAVE
    assert recomputed <= _new_tokens(smol, conv, done), recomputed  # Q3 and the answer before

    assert conv.switch(2, +1)  # and to V2 again
    done = _answer(gen, conv, Q3)
    assert cache.stats.restores == 2
    assert done.stats.n_prompt_tokens - done.stats.n_cached_tokens <= \
        _new_tokens(smol, conv, done)

    # the restored state gives the reply a cold run gives
    ctx.clear()
    cold = list(Generator.alone(ctx).chat(conv.engine_messages()[:-1], GREEDY))[-1]
    assert cold.stats.n_cached_tokens == 0 and cold.token_ids == done.token_ids


def test_switching_conversations_prefills_only_the_new_tokens(smol, ctx) -> None:
    cache = StateCache(64 << 20)
    gen = Generator.alone(ctx, cache=cache)
    a, b = Conversation(), Conversation()
    a.add_user(Q1, system_prompt=SYSTEM)
    _version(a, V1)
    _answer(gen, a, Q2)
    b.add_user("Tell me about mountains.", system_prompt=SYSTEM)
    _version(b, V2)
    _answer(gen, b, Q2)  # A is saved
    done = _answer(gen, a, Q3)  # B is saved, A restored
    assert cache.stats.saves == 2 and cache.stats.restores == 1
    assert done.stats.n_prompt_tokens - done.stats.n_cached_tokens <= _new_tokens(smol, a, done)


def test_a_failed_restore_re_prefills_and_gives_the_same_reply(smol, ctx) -> None:
    cache = StateCache(64 << 20)
    gen = Generator.alone(ctx, cache=cache)
    conv = _two_versions(gen)
    for key, entry in list(cache._entries.items()):  # damage V1's saved state
        (tokens, data), *rest = entry
        cache._entries[key] = ((tokens, data[:len(data) // 2]), *rest)
    assert conv.switch(2, -1)
    done = _answer(gen, conv, Q3)
    assert cache.stats.restores == 0 and len(cache) == 1  # the bad state is dropped, V2 kept
    assert done.stats.n_cached_tokens == 0  # the failed restore left the context empty
    ctx.clear()
    cold = list(Generator.alone(ctx).chat(conv.engine_messages()[:-1], GREEDY))[-1]
    assert cold.token_ids == done.token_ids


def test_the_draft_context_is_restored_alongside(smol, ctx) -> None:
    from engine.decode.speculative.controller import CostModel
    from engine.decode.speculative.draft_model import ModelDrafter
    from engine.decode.speculative.params import SpeculativeParams
    from engine.decode.speculative.speculator import Speculation

    with LlamaSequence(smol, ContextParams(n_ctx=1024, n_threads=1)) as dctx:
        spec = Speculation(SpeculativeParams(drafter="model"), CostModel(((1, 1.0),)),
                           model=ModelDrafter(dctx, p_min=0.0))
        spec.draft_ctx = dctx
        cache = StateCache(64 << 20)
        gen = Generator.alone(ctx, spec, cache)
        conv = _two_versions(gen)
        assert len(dctx.tokens) > MIN_SAVE  # the draft model followed the conversation
        decoded: list[int] = []
        real = dctx.decode
        dctx.decode = lambda toks, **kw: (decoded.append(len(toks)), real(toks, **kw))[1]
        assert conv.switch(2, -1)
        done = _answer(gen, conv, Q3)
        assert cache.stats.restores == 1 and done.stats.proposed > 0
        # the draft model's first catch-up is the new tokens, not V1's whole branch again
        assert decoded and decoded[0] <= _new_tokens(smol, conv, done), decoded
