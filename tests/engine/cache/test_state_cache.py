"""The conversation state cache on real contexts: save on a switch, restore the best prefix
(target and draft alike), evict the least recently used within the byte budget."""

from __future__ import annotations

import numpy as np
import pytest

from engine.cache.prefix import common_prefix
from engine.cache.state_cache import MIN_SAVE, StateCache
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams

TEXT_A = "The quick brown fox jumps over the lazy dog while the cat watches from the fence. " * 5
TEXT_B = "In 1905 Einstein published four papers that changed physics for good, one on light. " * 5


@pytest.fixture
def contexts(smol):
    made = [LlamaSequence(smol, ContextParams(n_ctx=512, n_threads=1)) for _ in range(3)]
    yield made
    for c in made:
        c.close()


def test_a_switched_out_conversation_comes_back_exactly(smol, contexts):
    target, draft, reference = contexts
    a, b = smol.tokenize(TEXT_A), smol.tokenize(TEXT_B)
    more = smol.tokenize(" And then?", add_special=False)
    assert len(a) > MIN_SAVE and len(b) > MIN_SAVE
    target.decode(a)
    draft.decode(a[:-1])  # a draft context lags the target by a token or so
    cache = StateCache(64 << 20)

    # Conversation B arrives: A (more than MIN_SAVE tokens would be discarded) is saved first.
    assert cache.prepare([target, draft], b + more) <= 1
    assert cache.stats.saves == 1 and len(cache) == 1
    target.rewind(0)
    target.decode(b)
    draft.rewind(0)
    draft.decode(b)

    # A comes back with a new message: both contexts hold A again, nothing to re-prefill.
    assert cache.prepare([target, draft], a + more) == len(a)
    assert target.tokens == a and draft.tokens == a[:-1]
    assert cache.stats.restores == 1 and cache.stats.saves == 2  # B was saved on the way out
    target.decode(more)
    reference.decode(a)
    reference.decode(more)
    assert np.array_equal(target.logits(), reference.logits())


def test_the_cache_keeps_the_most_recent_states_within_its_budget(smol, contexts):
    target = contexts[0]
    a, b = smol.tokenize(TEXT_A), smol.tokenize(TEXT_B)
    target.decode(a)
    one_state = len(target.state_bytes())
    cache = StateCache(int(one_state * 1.5))  # room for one conversation
    cache.prepare([target], b)
    target.rewind(0)
    target.decode(b)
    cache.prepare([target], a)  # saves B, which evicts A
    assert len(cache) == 1 and cache.stats.evictions == 1
    assert cache.used_bytes <= cache.max_bytes
    assert cache.prepare([target], b) == len(b) and target.tokens == b  # B is the one kept


def test_a_state_is_not_saved_where_reading_its_tokens_again_costs_less(smol, contexts):
    target = contexts[0]
    a, b = smol.tokenize(TEXT_A), smol.tokenize(TEXT_B)
    target.decode(a)
    cache = StateCache(64 << 20)
    assert cache.prepare([target], b, read_s_per_token=1e-9) <= 1  # no save measured yet: saved
    assert cache.stats.saves == 1 and cache.save_s_per_token
    target.rewind(0)
    target.decode(b)
    # what the save took per token, against reading at 1000x that cost (a CPU) or a thousandth (a GPU)
    assert cache.prepare([target], a, read_s_per_token=cache.save_s_per_token * 1000) == len(a)
    assert cache.stats.saves == 2 and cache.stats.unsaved == 0
    target.rewind(0)
    target.decode(b)
    cache.prepare([target], a + b, read_s_per_token=cache.save_s_per_token / 1000)
    assert cache.stats.saves == 2 and cache.stats.unsaved == 1 and len(cache) == 2


def test_a_conversation_past_its_context_keeps_its_shifted_cache(smol, contexts):
    """Past the context's edge the oldest turns are dropped and the cache shifts: the live
    context then shares only the head with the prompt, and a saved state that shared a few
    more tokens of the template (another conversation) used to be restored instead, so every
    kept turn was read again (issue 59: 16 of 450 tokens reused)."""
    target = contexts[0]
    head = smol.tokenize("System: be brief.\n")
    turn = smol.tokenize_text
    a, b, c = (turn(f"\nUser: Turn {i}. " + t) for i, t in ((1, TEXT_A), (2, TEXT_B), (3, TEXT_A)))
    cache = StateCache(64 << 20)
    other = head + turn("\nUser: Turn 2. Another conversation. " + TEXT_B)
    target.decode(other)
    live = common_prefix(other, head + a)
    assert len(head) < live < len(head + a)  # they share "\nUser: Turn"
    assert cache.prepare([target], head + a) == live and cache.stats.saves == 1
    target.rewind(live)
    target.decode((head + a + b)[live:])
    prompt = head + b + c  # turn a dropped to fit
    shared = common_prefix(target.tokens, prompt)
    assert common_prefix(other, prompt) > shared  # the saved state shares "\nUser: Turn 2. "
    assert cache.prepare([target], prompt) == shared
    assert cache.stats.restores == 0 and target.tokens == head + a + b  # kept for the shift
