"""Tests of engine.decode.speculative.ngram: matching against a brute-force reference, the incremental
index under appends, rewinds and edits, copies within a reply, memory of rewound text, speed."""
from __future__ import annotations

import gc
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.decode.speculative.draft import Draft
from engine.decode.speculative.ngram import NgramDrafter
from engine.decode.speculative.tuning import TUNING


def wide() -> NgramDrafter:
    """A drafter matching 2- to 4-grams."""
    return NgramDrafter(ngram_min=2, ngram_max=4)


def reference(history: list[int], lo: int, hi: int, cap: int) -> tuple[int, ...]:
    """Brute force: longest suffix n-gram, most recent earlier start, continuation to the end."""
    length = len(history)
    for n in range(min(hi, length - 1), lo - 1, -1):
        suffix = history[length - n:]
        for s in range(length - n - 1, -1, -1):
            if history[s:s + n] == suffix:
                return tuple(history[s + n:s + n + cap])
    return ()


def test_most_recent_occurrence_wins() -> None:
    draft = wide().propose([7, 8, 1, 2, 7, 8, 3, 4, 9, 7, 8], 3)
    assert draft.tokens == (3, 4, 9) and draft.match_len == 2


def test_longer_match_preferred_over_more_recent() -> None:
    # (5, 7, 8) occurred at 0 followed by 1; (7, 8) alone occurred later followed by 3.
    draft = wide().propose([5, 7, 8, 1, 1, 7, 8, 3, 3, 5, 7, 8], 2)
    assert draft.tokens == (1, 1) and draft.match_len == 3


def test_suffix_never_matches_itself_and_max_n_caps() -> None:
    d = wide()
    assert d.propose([1, 2, 3, 4], 5).tokens == ()
    assert d.propose([], 5).tokens == () and d.propose([1], 5).tokens == ()
    assert wide().propose([1, 2, 3, 1, 2], 10).tokens == (3, 1, 2)  # runs to the end
    h = list(range(20)) + [0, 1]
    assert d.propose(h, 5).tokens == (2, 3, 4, 5, 6)
    assert d.propose(h, 0).tokens == ()
    draft = d.propose(h, 1)
    assert isinstance(draft, Draft) and draft.source == "ngram"


def test_accepts_numpy_history_and_checks_sizes() -> None:
    h = np.array([3, 1, 4, 1, 5, 9, 3, 1], dtype=np.int32)
    assert wide().propose(h, 3).tokens == (4, 1, 5)
    assert all(type(t) is int for t in wide().propose(h, 3).tokens)
    with pytest.raises(ValueError):
        NgramDrafter(ngram_min=3, ngram_max=2)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(0, 3), min_size=1, max_size=30)),
        st.tuples(st.just("truncate"), st.integers(0, 40)),
        st.tuples(st.just("rewrite"), st.integers(1, 20), st.lists(st.integers(0, 3), max_size=20)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, lo=st.integers(1, 3), extra=st.integers(0, 3), max_n=st.integers(1, 12))
def test_incremental_index_matches_reference_and_rebuild(ops: list[tuple], lo: int, extra: int,
                                                         max_n: int) -> None:
    """Outside a reply (no ``begin``) a proposal is the continuation of the latest occurrence
    of the longest suffix n-gram, however the history got there: grown, cut back, or its tail
    rewritten (a rewrite that keeps the last token goes through ``begin``, as a new reply)."""
    drafter = NgramDrafter(ngram_min=lo, ngram_max=lo + extra)
    history: list[int] = []
    for op in ops:
        if op[0] == "append":
            history = history + op[1]
        elif op[0] == "truncate":
            history = history[:max(0, len(history) - op[1])]
        else:
            kept = history[:max(0, len(history) - op[1])]
            new = kept + op[2]
            if len(new) >= len(history) and new[len(history) - 1:len(history)] == history[-1:]:
                drafter.reset()  # the last indexed token survived the rewrite: only begin would see it
            history = kept + op[2]
        assert drafter.propose(history, max_n).tokens == reference(history, lo, lo + extra, max_n)
        fresh = NgramDrafter(ngram_min=lo, ngram_max=lo + extra)
        fresh.propose(history, max_n)
        assert drafter._index == fresh._index and drafter.history == history


def test_match_len_measures_agreement_before_the_match() -> None:
    d = wide()
    assert d.propose([7, 8, 9, 1, 2, 3, 4, 5, 6, 1, 2], 4).match_len == 2
    d.reset()
    assert d.propose([10, 11, 12, 13, 14, 15, 16, 99, 11, 12, 13, 14, 15, 16], 2).match_len == 6


def test_propose_per_token_is_constant_time() -> None:
    """Four times the tokens take about four times as long (a rescan per step would take 16
    times). This thread's CPU time, the collector paused: other threads and processes do not count."""
    tokens = np.random.default_rng(2).integers(0, 50, 20_000).tolist()

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
    assert long < 10 * short, (short, long)


# -- within a reply: copies go on, and resume next to where an edit broke them ----------------

def run_copy_loop(prompt: list[int], reply: list[int], k_max: int = 32) -> tuple[int, int]:
    """A reply through the drafter with a perfect verifier: (passes, drafted tokens accepted)."""
    d = NgramDrafter()
    d.begin(prompt)
    out: list[int] = []
    passes = accepted = 0
    while len(out) < len(reply):
        draft = d.propose(prompt + out, k_max).tokens[:len(reply) - len(out)]
        truth = reply[len(out):len(out) + len(draft) + 1]
        n = next((i for i, t in enumerate(draft) if t != truth[i]), len(draft))
        out += truth[:n + 1]
        passes += 1
        accepted += n
    assert out == reply
    return passes, accepted


def test_a_copy_with_small_edits_is_drafted_in_long_runs() -> None:
    prompt = np.random.default_rng(0).integers(0, 2000, 600).tolist()
    reply = prompt[100:300] + [5001, 5002] + prompt[302:500] + [5003] + prompt[501:560]
    passes, accepted = run_copy_loop(prompt, reply)
    assert passes < 45 and accepted > 0.9 * len(reply)  # plain decoding: 460 passes


def test_unrelated_reply_drafts_nothing() -> None:
    rng = np.random.default_rng(1)
    prompt, reply = rng.integers(0, 2000, 300).tolist(), rng.integers(2000, 4000, 100).tolist()
    assert run_copy_loop(prompt, reply) == (100, 0)


def test_a_right_prediction_continues_the_same_copy() -> None:
    # (1, 2) occurs twice; the reply copies the first: the latest occurrence would be the second.
    source = [50, 1, 2, 3, 4, 5, 6, 60, 1, 2, 9, 9]
    d = wide()
    d.begin(source)
    assert d.propose(source + [50, 1, 2], 3).tokens == (3, 4, 5)


def test_a_copy_resumes_after_an_edit_next_to_where_it_broke() -> None:
    source = list(range(100, 140))
    reply = list(range(100, 110)) + [999, 111]  # 110 replaced by 999, then the copy goes on
    d = wide()
    d.begin(source)
    assert d.propose(source + reply, 4).tokens == (112, 113, 114, 115)
    assert wide().propose(source + reply, 4).tokens == ()  # no 2-gram matches there
    far = wide()
    far.begin(source)
    gap = [999] * (TUNING.edit_span + 1)  # a rewrite longer than an edit: the anchor is given up
    assert far.propose(source + source[:10] + gap + [135], 4).tokens == ()


def test_predictions_are_scored_on_every_reply_token_and_only_there() -> None:
    source = list(range(100, 180))
    d = wide()
    d.begin(source)
    before = d.odds.p(20)
    d.propose(source + source[:40], 1)  # one call, forty tokens: each was predicted and scored
    assert d.odds.p(20) > before
    d.begin(source + source[:40])  # a new reply starts from the prior
    assert d.odds.p(20) == before
    assert len(d.propose(source + source[:40], 3).survival) == 3


def test_begin_sees_an_edit_in_the_middle_of_the_history() -> None:
    head, tail = list(range(100, 140)), list(range(200, 240))
    old = head + [1, 2, 3, 4, 5, 6, 7, 8] + tail
    new = head + [9, 9, 9, 9, 9, 9, 9, 9] + tail
    d = wide()
    d.begin(old)
    d.begin(new)
    assert d.history == new
    # head's end is followed by 9 in the history and by 1 in the remembered turn: the history wins
    assert d.propose(new + head[-4:], 8).tokens[:2] == (9, 9)


# -- memory of rewound text ------------------------------------------------------------------

def test_a_regenerated_reply_is_drafted_from_the_one_it_replaces() -> None:
    rng = np.random.default_rng(3)
    prompt = rng.integers(1000, 2000, 60).tolist()
    reply = rng.integers(3000, 4000, 40).tolist()
    d = wide()
    d.begin(prompt)
    d.propose(prompt + reply, 1)  # the reply streamed
    d.begin(prompt)  # regenerate: the reply is rewound away
    assert d.history == prompt
    draft = d.propose(prompt, 16)
    assert draft.tokens == tuple(reply[:16]) and draft.survival[0] >= 0.9
    # past ``agree_cap`` only the reply's own count makes a copy surer: once some of its tokens
    # agree with the remembered reply, the rest is drafted in long runs
    draft = d.propose(prompt + reply[:12], 16)
    assert draft.tokens == tuple(reply[12:28]) and draft.survival[-1] > 0.5


def test_memory_is_bounded_the_history_wins_and_reset_forgets() -> None:
    rng = np.random.default_rng(4)
    prompt = rng.integers(1000, 2000, 30).tolist()
    d = wide()
    for _ in range(12):  # twelve 500-token replies, each regenerated
        d.begin(prompt)
        d.propose(prompt + rng.integers(3000, 9000, 500).tolist(), 1)
    d.begin(prompt)
    remembered = d._tokens[:len(d._tokens) - len(d.history)]
    assert len(remembered) <= TUNING.memory_tokens
    fresh = wide()
    fresh._reindex(remembered)
    fresh.propose(prompt, 1)
    assert fresh._index == d._index  # what indexing memory + history from scratch gives
    shared = d._tokens[100:104]  # an n-gram in both memory and history: the history's continuation
    assert d.propose(prompt + shared + [77, 78] + shared[:2], 2).tokens == tuple(shared[2:4])
    d.reset()
    d.begin(prompt)
    assert d.propose(prompt, 8).tokens == ()


def test_remembered_text_needs_the_reply_to_agree_with_it() -> None:
    """Two requests that end alike (the same file after other instructions) get different
    replies: the old reply is drafted only once the new one agrees with it over ``agree_cap``
    tokens of its own."""
    rng = np.random.default_rng(5)
    code = rng.integers(1000, 2000, 80).tolist()
    old_prompt, new_prompt = [7, 1, 2, 3] + code, [7, 4, 5, 6] + code
    old_reply = rng.integers(3000, 4000, 60).tolist()
    n = TUNING.agree_cap
    d = wide()
    d.begin(old_prompt)
    d.propose(old_prompt + old_reply, 1)
    d.begin(new_prompt)
    assert d.propose(new_prompt, 8).tokens == ()
    assert not set(d.propose(new_prompt + old_reply[:n - 1], 8).tokens) & set(old_reply)
    assert d.propose(new_prompt + old_reply[:n], 8).tokens == tuple(old_reply[n:n + 8])


def test_tokens_a_grammar_forced_are_neither_agreement_nor_scored() -> None:
    """A list of items whose keys a grammar forces and whose values the model chooses: after an
    item's keys, the item before is a copy of the keys only. Counted, the keys made the copy of
    its values look sure; not counted, the copy stands on the one free token that agrees."""
    keys, values = [50, 51, 52, 53, 54, 55], [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    prompt = [90, 91, 92]

    def reply_with(forced: bool) -> tuple[NgramDrafter, Draft]:
        d = wide()
        d.begin(prompt)
        history = list(prompt)
        for item in values[:2]:  # two items: keys forced (each in its own pass), values free
            history += keys
            d.propose(history, 4, forced=len(keys) if forced else 0)
            for tok in item:
                history.append(tok)
                d.propose(history, 4)
        history += keys
        return d, d.propose(history, 3, forced=len(keys) if forced else 0)

    counted, free = reply_with(False)[1], reply_with(True)[1]
    assert counted.tokens == free.tokens == (4, 5, 6)  # the same copy is drafted
    assert counted.match_len > free.match_len == 0
    assert free.survival[0] < counted.survival[0]
    scored = [sum(n for _, n in d.odds._by_agree.values()) for d in (reply_with(f)[0] for f in (False, True))]
    assert scored[1] <= 6 < scored[0]  # with forced keys, only the six values were scored


def test_under_a_grammar_a_copy_resumed_near_a_break_counts_as_one_the_lookup_found() -> None:
    """In a reply a grammar shapes, every item resumes the one before next to where it broke
    off (the structure around the values is the same): such a copy gets the lookup's discount."""
    source = list(range(100, 140))
    reply = [7] + source[:10] + [99] + source[11:14]  # breaks at source[10], resumes after it

    def draft(grammar: bool) -> Draft:
        d = wide()
        d.begin(source)
        d.propose(source + reply[:1], 4, forced=1 if grammar else 0)  # the reply's first token forced
        out = d.propose(source + reply, 4)
        assert d._next is not None and d._next.near  # the copy resumed next to the break
        return out

    free, constrained = draft(False), draft(True)
    assert free.tokens == constrained.tokens == tuple(source[14:18])
    assert constrained.survival[0] < free.survival[0]


def test_the_templates_control_tokens_are_no_agreement(qwen_target) -> None:
    """Every turn of a chat opens with the template's control tokens: a reply's first token
    agrees with an earlier reply's opening over them, which says nothing of a copy."""
    def chat(*turns: str) -> list[int]:
        text = "".join(f"<|im_start|>{t}<|im_end|>\n" for t in turns)
        return qwen_target.tokenize(text + "<|im_start|>assistant\n", add_special=False)

    prompt = chat("user\nName a colour.", "assistant\nBlue is a calm colour.", "user\nAnother?")
    first = qwen_target.tokenize("Blue", add_special=False)
    with_vocab, without = NgramDrafter(qwen_target), NgramDrafter()
    drafts = []
    for d in (with_vocab, without):
        d.begin(prompt)
        drafts.append(d.propose(prompt + first, 4))
    assert drafts[0].tokens == drafts[1].tokens != ()  # the earlier reply, copied either way
    # agreement: "Blue", "\n", "assistant", "\n" (and <|im_start|>, <|im_end|> without a vocab)
    assert (drafts[0].match_len, drafts[1].match_len) == (4, 6)
    assert drafts[0].survival[0] < drafts[1].survival[0]
