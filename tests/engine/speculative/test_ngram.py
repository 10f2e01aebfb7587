"""Tests of engine.speculative.ngram: matching semantics against a brute-force reference, the
incremental index under appends, rewinds and edits, the match length, and speed."""
from __future__ import annotations

import gc
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.speculative.draft import Draft
from engine.speculative.ngram import NgramDrafter, NgramParams


def reference(history: list[int], params: NgramParams, cap: int) -> tuple[int, ...]:
    """Brute force: longest suffix n-gram, most recent earlier start, continuation to the end."""
    length = len(history)
    for n in range(min(params.ngram_max, length - 1), params.ngram_min - 1, -1):
        suffix = history[length - n:]
        for s in range(length - n - 1, -1, -1):
            if history[s:s + n] == suffix:
                return tuple(history[s + n:s + n + cap])
    return ()


WIDE = NgramParams(ngram_min=2, ngram_max=4)


def test_most_recent_occurrence_wins() -> None:
    d = NgramDrafter(WIDE)
    h = [7, 8, 1, 2, 7, 8, 3, 4, 9, 7, 8]
    draft = d.propose(h, 3)
    assert draft.tokens == (3, 4, 9) and draft.match_len == 2


def test_longer_match_preferred_over_more_recent() -> None:
    d = NgramDrafter(WIDE)
    # (5, 7, 8) occurred at 0 followed by 1; (7, 8) alone occurred later followed by 3.
    h = [5, 7, 8, 1, 1, 7, 8, 3, 3, 5, 7, 8]
    draft = d.propose(h, 2)
    assert draft.tokens == (1, 1) and draft.match_len == 3


def test_suffix_never_matches_itself() -> None:
    d = NgramDrafter(WIDE)
    assert d.propose([1, 2, 3, 4], 5).tokens == ()
    assert d.propose([], 5).tokens == ()
    assert d.propose([1], 5).tokens == ()


def test_continuation_runs_to_end_of_history_and_overlaps() -> None:
    d = NgramDrafter(WIDE)
    assert d.propose([1, 2, 3, 1, 2], 10).tokens == (3, 1, 2)
    assert NgramDrafter(WIDE).propose([4, 4, 4, 4], 10).tokens == (4,)  # (4,4,4) at 0, then one 4


def test_max_n_caps_and_zero_gives_empty() -> None:
    d = NgramDrafter(WIDE)
    h = list(range(20)) + [0, 1]
    assert d.propose(h, 5).tokens == (2, 3, 4, 5, 6)
    assert d.propose(h, 0).tokens == ()
    draft = d.propose(h, 1)
    assert isinstance(draft, Draft) and draft.source == "ngram"


def test_accepts_numpy_history() -> None:
    d = NgramDrafter(WIDE)
    h = np.array([3, 1, 4, 1, 5, 9, 3, 1], dtype=np.int32)
    assert d.propose(h, 3).tokens == (4, 1, 5)
    assert all(type(t) is int for t in d.propose(h, 3).tokens)


def test_params_validation() -> None:
    with pytest.raises(ValueError):
        NgramParams(ngram_min=3, ngram_max=2)
    with pytest.raises(ValueError):
        NgramParams(ngram_min=0)


# ------------------------------------------------------------- incremental index

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(0, 3), min_size=1, max_size=30)),
        st.tuples(st.just("truncate"), st.integers(0, 40)),
        st.tuples(st.just("rewrite_tail"), st.integers(1, 16), st.lists(st.integers(0, 3), max_size=20)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, lo=st.integers(1, 3), extra=st.integers(0, 3), max_n=st.integers(1, 12))
def test_incremental_index_matches_reference_and_rebuild(ops, lo, extra, max_n) -> None:
    params = NgramParams(ngram_min=lo, ngram_max=lo + extra)
    drafter = NgramDrafter(params)
    history: list[int] = []
    for op in ops:
        if op[0] == "append":
            history = history + op[1]
        elif op[0] == "truncate":
            history = history[:max(0, len(history) - op[1])]
        else:  # replace up to the last 16 tokens (all inside the checked tail window)
            _, m, new = op
            history = history[:max(0, len(history) - m)] + new
        got = drafter.propose(history, max_n)
        assert got.tokens == reference(history, params, min(max_n, 12))
        fresh = NgramDrafter(params)
        fresh.propose(history, max_n)
        assert drafter._index == fresh._index  # incremental == from-scratch
        assert drafter._tokens == history


def test_edit_at_start_is_detected() -> None:
    d = NgramDrafter(WIDE)
    h = [1, 2, 3, 4, 1, 2]
    assert d.propose(h, 2).tokens == (3, 4)
    h2 = [1, 2, 8, 4, 1, 2]  # same length, edited inside the head window
    assert d.propose(h2, 2).tokens == (8, 4)


def test_rewind_forgets_discarded_tokens() -> None:
    d = NgramDrafter(WIDE)
    long = [1, 2, 9, 9, 5, 5, 1, 2]
    assert d.propose(long, 2).tokens == (9, 9)
    assert d.propose(long[:4] + [1, 2], 2).tokens == (9, 9)
    assert d.propose([5, 5, 1, 2], 2).tokens == ()  # earlier (1, 2) was discarded


# ------------------------------------------------------------- adaptive length

def test_match_len_measures_agreement_before_the_match() -> None:
    d = NgramDrafter(WIDE)
    # ... 7 8 9 1 2 | 3 4 ... later: 5 6 1 2 -> agrees only on "1 2"
    assert d.propose([7, 8, 9, 1, 2, 3, 4, 5, 6, 1, 2], 4).match_len == 2
    d.reset()
    # long copy: the suffix agrees with the earlier text for 6 tokens
    assert d.propose([10, 11, 12, 13, 14, 15, 16, 99, 11, 12, 13, 14, 15, 16], 2).match_len == 6
    assert d.propose([1, 2, 3], 4).match_len == 0


def run_copy_loop(prompt: list[int], reply: list[int], k_max: int = 32) -> tuple[int, int]:
    """Greedy loop with a perfect verifier: returns (passes, drafted tokens accepted)."""
    d = NgramDrafter()
    out: list[int] = []
    passes = accepted = 0
    while len(out) < len(reply):
        draft = d.propose(prompt + out, k_max).tokens[: len(reply) - len(out)]
        truth = reply[len(out):len(out) + len(draft) + 1]
        n = next((i for i, t in enumerate(draft) if t != truth[i]), len(draft))
        out += truth[: n + 1]
        passes += 1
        accepted += n
    assert out == reply
    return passes, accepted


def test_code_edit_copy_is_drafted_in_long_runs() -> None:
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 2000, 600).tolist()
    # The reply copies the prompt's code with two small edits.
    reply = prompt[100:300] + [5001, 5002] + prompt[302:500] + [5003] + prompt[501:560]
    passes, accepted = run_copy_loop(prompt, reply)
    assert len(reply) == 460
    assert passes < 45  # plain decoding would need 460
    assert accepted > 0.9 * len(reply)


def test_unrelated_reply_drafts_nothing_useful() -> None:
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 2000, 300).tolist()
    reply = rng.integers(2000, 4000, 100).tolist()
    passes, accepted = run_copy_loop(prompt, reply)
    assert passes == 100 and accepted == 0


def test_propose_per_token_is_constant_time() -> None:
    """Four times the tokens take about four times as long (a rescan per step would take 16 times).
    Timed in this thread's CPU time with the garbage collector paused: other threads (llama.cpp's,
    from earlier tests), other processes and collections of the whole heap do not count."""
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 50, 20_000).tolist()

    def seconds(n: int) -> float:
        d = NgramDrafter()
        history: list[int] = []
        gc.collect()
        gc.disable()
        try:
            start = time.thread_time()
            for t in tokens[:n]:
                history.append(t)
                d.propose(history, 16)
            return time.thread_time() - start
        finally:
            gc.enable()

    short, long = min(seconds(5_000) for _ in range(3)), min(seconds(20_000) for _ in range(3))
    assert long < 10 * short, (short, long)  # measured: 5.2x (the index outgrows the caches)


# -- within a reply (begin): copies go on, and resume next to where an edit broke them --------

def test_a_right_prediction_continues_the_same_copy() -> None:
    # The source contains (1, 2) twice; the reply copies the first occurrence. Latest-occurrence
    # lookup alone would jump to the second; a copy in progress keeps going.
    source = [50, 1, 2, 3, 4, 5, 6, 60, 1, 2, 9, 9]
    d = NgramDrafter(WIDE)
    d.begin(source)
    reply = [50, 1, 2]
    assert d.propose(source + reply, 3).tokens == (3, 4, 5)


def test_a_copy_resumes_after_an_edit_next_to_where_it_broke() -> None:
    source = list(range(100, 140))
    d = NgramDrafter(WIDE)
    d.begin(source)
    reply = list(range(100, 110)) + [999, 111]  # 110 replaced by 999, then the copy goes on
    draft = d.propose(source + reply, 4)
    assert draft.tokens == (112, 113, 114, 115)
    assert NgramDrafter(WIDE).propose(source + reply, 4).tokens == ()  # no n-gram of 2 matches


def test_predictions_are_scored_on_every_reply_token_and_only_there() -> None:
    source = list(range(100, 180))
    d = NgramDrafter(WIDE)
    d.begin(source)
    before = d.reliability.p(20)
    d.propose(source + source[:40], 1)  # one call, forty tokens: each was predicted and scored
    assert d.reliability.p(20) > before
    d.begin(source + source[:40])  # a new reply starts from the priors
    assert d.reliability.p(20) == before
    assert d.propose(source + source[:40], 1).survival  # a proposal comes with its survival


def test_begin_sees_an_edit_in_the_middle_of_the_history() -> None:
    """An edit that leaves both ends of the history as they were (a regenerated turn of the
    same length deep in a conversation) is caught at ``begin``: the history is the new text,
    and the replaced turn is only remembered (the history's own matches win)."""
    head, tail = list(range(100, 140)), list(range(200, 240))
    old = head + [1, 2, 3, 4, 5, 6, 7, 8] + tail
    new = head + [9, 9, 9, 9, 9, 9, 9, 9] + tail
    d = NgramDrafter(WIDE)
    d.begin(old)
    d.begin(new)
    assert d.history == new
    # head's last four tokens are followed by 9 in the history and by 1 in the remembered turn
    assert d.propose(new + head[-4:], 8).tokens[:2] == (9, 9)


# ------------------------------------------------------------- memory of rewound text

def test_a_regenerated_reply_is_drafted_from_the_one_it_replaces() -> None:
    rng = np.random.default_rng(3)
    prompt = [int(t) for t in rng.integers(1000, 2000, 60)]
    reply = [int(t) for t in rng.integers(3000, 4000, 40)]
    d = NgramDrafter(WIDE)
    d.begin(prompt)
    d.propose(prompt + reply, 1)  # the reply streamed
    d.begin(prompt)  # regenerate: the reply is rewound away
    assert d.history == prompt
    draft = d.propose(prompt, 16)
    assert draft.tokens == tuple(reply[:16])
    assert draft.match_len >= 16  # the remembered span came with the prompt's tail


def test_memory_is_bounded_the_history_wins_and_reset_forgets() -> None:
    from engine.speculative.ngram import MEMORY_TOKENS

    rng = np.random.default_rng(4)
    prompt = [int(t) for t in rng.integers(1000, 2000, 30)]
    d = NgramDrafter(WIDE)
    for _ in range(12):  # twelve 500-token replies, each regenerated
        d.begin(prompt)
        d.propose(prompt + [int(t) for t in rng.integers(3000, 9000, 500)], 1)
    d.begin(prompt)
    assert len(d._tokens) - len(d.history) <= MEMORY_TOKENS
    fresh = NgramDrafter(WIDE)  # the index is what indexing memory + history from scratch gives
    fresh._reindex(d._tokens[:len(d._tokens) - len(d.history)])
    fresh.propose(prompt, 1)
    assert fresh._index == d._index
    # an n-gram in both memory and history: the history's continuation is drafted
    shared = d._tokens[100:104]
    history = prompt + shared + [77, 78] + shared[:2]
    assert d.propose(history, 2).tokens == tuple(shared[2:4])
    d.reset()
    d.begin(prompt)
    assert d.propose(prompt, 8).tokens == ()


def test_remembered_text_needs_the_reply_to_agree_with_it() -> None:
    """Two requests that end alike (the same file after different instructions) get different
    replies: the old reply is not drafted at the new one's start, only once the new reply has
    agreed with it over MEMORY_MIN_AGREE tokens of its own."""
    from engine.speculative.ngram import MEMORY_MIN_AGREE

    rng = np.random.default_rng(5)
    code = [int(t) for t in rng.integers(1000, 2000, 80)]
    old_prompt, new_prompt = [7, 1, 2, 3] + code, [7, 4, 5, 6] + code  # instruction, then the file
    old_reply = [int(t) for t in rng.integers(3000, 4000, 60)]
    d = NgramDrafter(WIDE)
    d.begin(old_prompt)
    d.propose(old_prompt + old_reply, 1)
    d.begin(new_prompt)
    assert d.propose(new_prompt, 8).tokens == ()  # the shared tail is not the reply's evidence
    said = old_reply[:MEMORY_MIN_AGREE - 1]
    assert not set(d.propose(new_prompt + said, 8).tokens) & set(old_reply)
    said = old_reply[:MEMORY_MIN_AGREE]
    assert d.propose(new_prompt + said, 8).tokens == tuple(old_reply[MEMORY_MIN_AGREE:MEMORY_MIN_AGREE + 8])
