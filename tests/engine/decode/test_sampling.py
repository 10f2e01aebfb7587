import warnings

import numpy as np
import pytest

from engine.decode.sampling import Sampler, SamplingParams, distribution, penalties


def logits(seed=0, n=1000):
    return np.random.default_rng(seed).normal(size=n).astype(np.float32) * 3


def test_greedy_is_argmax():
    lg = logits()
    assert Sampler(SamplingParams(temperature=0)).pick(lg, []) == int(np.argmax(lg))


def draws(sampler, lg, n=50):
    """``n`` draws from the same logits at positions 0..n-1 (the penalty is off)."""
    return [sampler.pick(lg, [0] * i) for i in range(n)]


def test_seeded_sampling_reproducible_and_seed_sensitive():
    lg = logits()
    p = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=42)
    a = [Sampler(p).pick(lg, [1, 2]) for _ in range(3)]
    seq1, seq2 = draws(Sampler(p), lg), draws(Sampler(p), lg)
    assert seq1 == seq2 and len(set(a)) == 1 and len(set(seq1)) > 1
    s3 = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=43))
    assert draws(s3, lg) != seq1


@pytest.mark.parametrize("peak", [0.0, 12.0, 100.0])
def test_top_k_keeps_the_k_best_however_far_the_best_stands_out(peak):
    """A row where the best token stands 0, 12 or 100 above a spread of others."""
    lg = logits(seed=5)
    lg[17] = lg.max() + peak
    ids, _ = distribution(lg, SamplingParams(temperature=1.0, top_k=9, top_p=1.0, min_p=0.0))
    assert sorted(ids.tolist()) == sorted(np.argsort(-lg)[:9].tolist())


def test_top_k_top_p_min_p_restrict_support():
    lg = logits()
    ids, probs = distribution(lg, SamplingParams(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0))
    assert set(ids) == set(np.argsort(-lg)[:5]) and np.isclose(probs.sum(), 1)
    ids, probs = distribution(lg, SamplingParams(temperature=1.0, top_k=0, top_p=0.5, min_p=0.0))
    full = np.exp(lg - lg.max())
    full /= full.sum()
    assert np.sort(full)[::-1][: len(ids) - 1].sum() < 0.5 <= np.sort(full)[::-1][: len(ids)].sum() + 1e-9
    ids, _ = distribution(lg, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.5))
    assert all(full[i] >= 0.5 * full.max() for i in ids)


def test_sampling_frequencies_follow_distribution():
    lg = np.log(np.array([0.5, 0.3, 0.2], dtype=np.float32))
    s = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1))
    counts = np.bincount(draws(s, lg, 20000), minlength=3) / 20000
    assert np.allclose(counts, [0.5, 0.3, 0.2], atol=0.015)


def test_repeat_penalty():
    lg = np.array([2.0, -1.0, 1.0], dtype=np.float32)
    out = penalties(lg, SamplingParams(repeat_penalty=2.0), [0, 1])
    assert out.tolist() == [1.0, -2.0, 1.0] and lg.tolist() == [2.0, -1.0, 1.0]
    assert penalties(lg, SamplingParams(), [0]) is lg
    assert penalties(lg, SamplingParams(repeat_penalty=2.0, repeat_last_n=0), [0]) is lg


def test_a_tiny_repeat_penalty_keeps_the_logits_finite():
    """Found by the HTTP fuzz: 1e-50 is a valid penalty (above 0), and dividing a float32 logit by
    it gave inf, then NaN probabilities."""
    lg = np.array([2.0, -1.0, 1.0], dtype=np.float32)
    p = SamplingParams(temperature=1.0, repeat_penalty=1e-50, seed=1)
    out = penalties(lg, p, [0, 1])
    assert np.isfinite(out).all() and out[0] > out[2] > 0 >= out[1]
    ids, probs = distribution(lg, p, [0, 1])
    assert np.isfinite(probs).all() and ids[0] == 0
    with warnings.catch_warnings():  # one that overflows float64 too: clipped, without a warning
        warnings.simplefilter("error", RuntimeWarning)
        out = penalties(lg, SamplingParams(repeat_penalty=1e-320), [0, 1])
    assert np.isfinite(out).all() and out[0] > out[2] > 0 >= out[1]


def test_presence_and_frequency_penalties_follow_llama_cpp():
    """logit -= count * frequency + presence, for each token in the window, after the repeat
    penalty (llama.cpp's penalties sampler)."""
    lg = np.array([2.0, -1.0, 1.0, 0.5], dtype=np.float32)
    p = SamplingParams(repeat_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25)
    out = penalties(lg, p, [0, 1, 0, 3, 0])
    assert np.allclose(out, [2.0 / 2 - 3 * 0.25 - 0.5, -1.0 * 2 - 0.25 - 0.5, 1.0,
                             0.5 / 2 - 0.25 - 0.5])
    assert penalties(lg, SamplingParams(presence_penalty=1.0, repeat_last_n=2), [0, 2]) \
        .tolist() == [1.0, -1.0, 0.0, 0.5]


@pytest.mark.parametrize("kw", [dict(temperature=-1), dict(top_p=1.5), dict(min_p=-0.1),
                                dict(max_tokens=0), dict(repeat_penalty=0), dict(top_k=-1),
                                dict(temperature=float("nan")), dict(top_k=1.5),
                                dict(temperature=True), dict(stop=("a",) * 17)])
def test_invalid_params(kw):
    with pytest.raises(ValueError):
        SamplingParams(**kw)


@pytest.mark.parametrize("kw", [dict(top_p=0.0), dict(min_p=1.0)])
def test_the_bounds_of_top_p_and_min_p_keep_the_most_likely_token(kw):
    """top-p 0 and min-p 1 are in range (OpenAI and llama.cpp accept them): they keep one token."""
    lg = np.log(np.array([0.1, 0.6, 0.3], dtype=np.float32))
    ids, probs = distribution(lg, SamplingParams(temperature=1.0, **kw))
    assert ids.tolist() == [1] and probs.tolist() == [1.0]


class EveryThird:
    """A grammar that allows the tokens whose id is a multiple of 3 (``most``: every other)."""

    def __init__(self, n: int, most: bool = False) -> None:
        self.allowed = (np.arange(n) % 3 == 0) != most

    def allows(self, token: int) -> bool:
        return bool(self.allowed[token])

    def mask(self) -> np.ndarray:
        return self.allowed


@pytest.mark.parametrize("grammar", ["none", "a third", "two thirds"])
@pytest.mark.parametrize("top_k", [0, 7])
def test_a_seeded_draw_is_the_gumbel_max_over_the_tokens_the_chain_keeps(top_k, grammar):
    """The draw at each position is the largest score / temperature + the position's noise,
    among the tokens the grammar allows and, of those, the ``top_k`` best (all when 0): worked
    out here by sorting every allowed token, as the chain's definition reads. (With two thirds
    allowed the top-k is found among the best of all tokens, with a third in the allowed ones.)"""
    from engine.decode.sampling import gumbel

    lg = logits(seed=3)
    p = SamplingParams(temperature=0.8, top_k=top_k, top_p=1.0, min_p=0.0, seed=11)
    grammar_ = None if grammar == "none" else EveryThird(len(lg), most=grammar == "two thirds")
    sampler = Sampler(p, grammar_)
    allowed = np.arange(len(lg)) if grammar_ is None else np.flatnonzero(grammar_.allowed)
    for position in range(40):
        order = allowed[np.argsort(-lg[allowed], kind="stable")]
        kept = order[:top_k] if top_k else order
        noisy = (lg[kept] - lg[kept].max()) / p.temperature + gumbel(11, position, kept)
        assert sampler.pick(lg, [0] * position) == int(kept[np.argmax(noisy)])


def test_a_logprob_is_the_log_softmax_with_the_most_likely_tokens_in_order():
    from engine.decode.sampling import logprob

    lg = logits(seed=9, n=151936)
    exact = lg.astype(np.float64) - np.logaddexp.reduce(lg.astype(np.float64))
    lp = logprob(lg, 1234, top_n=5)
    assert abs(lp.logprob - exact[1234]) < 1e-5
    best = np.argsort(-exact)[:5]
    assert [t for t, _ in lp.top] == best.tolist()
    assert np.allclose([v for _, v in lp.top], exact[best], atol=1e-5)


@pytest.mark.parametrize("spread", [0.5, 3.0, 12.0])
@pytest.mark.parametrize("kw", [dict(top_p=0.9), dict(top_p=0.999), dict(min_p=0.05), dict(min_p=1e-6),
                                dict(top_p=0.95, min_p=0.05)])
def test_without_a_top_k_top_p_and_min_p_keep_the_prefix_the_definition_gives(kw, spread):
    """On a whole vocabulary whose scores are flat, spread or peaked: the tokens kept are the
    prefix of all tokens sorted by score that the two cuts give, worked out by sorting."""
    lg = np.random.default_rng(int(spread * 10)).normal(size=151936).astype(np.float32) * spread
    p = SamplingParams(temperature=1.0, top_k=0, **{"top_p": 1.0, "min_p": 0.0, **kw})
    order = np.argsort(-lg.astype(np.float64), kind="stable")
    probs = np.exp(lg[order].astype(np.float64) - lg.max())
    probs /= probs.sum()
    keep = len(order)
    if p.top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1)
    if p.min_p > 0:
        keep = min(keep, max(1, int(np.count_nonzero(probs >= p.min_p * probs[0]))))
    ids, got = distribution(lg, p)
    assert sorted(ids.tolist()) == sorted(order[:keep].tolist())
    assert np.isclose(got.sum(), 1.0)
