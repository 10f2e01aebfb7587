"""Tests of engine.speculative.accept.verify: exhaustive greedy cases and seeded chi-square checks that
speculative sampling emits the target's distribution."""
from __future__ import annotations

import numpy as np
import pytest

from engine.speculative.accept import Verdict, verify

# 0.999 quantiles of the chi-square distribution (p = 0.001), by degrees of freedom.
CHI2_CRIT_999 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322,
                 8: 26.124, 9: 27.877, 10: 29.588, 15: 37.697, 24: 51.179, 35: 66.619}


def one_hot_rows(best: list[int], vocab: int = 6) -> np.ndarray:
    rows = np.zeros((len(best), vocab))
    rows[np.arange(len(best)), best] = 1.0
    return rows


# ---------------------------------------------------------------- greedy

@pytest.mark.parametrize(
    ("draft", "best", "expected"),
    [
        ([1, 2, 3], [1, 2, 3, 4], Verdict(3, 4)),  # all accepted, bonus from row k
        ([1, 2, 3], [5, 2, 3, 4], Verdict(0, 5)),  # first rejected
        ([1, 2, 3], [1, 0, 3, 4], Verdict(1, 0)),  # middle rejected, later match is ignored
        ([1, 2, 3], [1, 2, 5, 4], Verdict(2, 5)),  # last rejected
        ([], [3], Verdict(0, 3)),                  # k = 0: plain argmax of row 0
    ],
)
def test_greedy_cases(draft: list[int], best: list[int], expected: Verdict) -> None:
    logits = one_hot_rows(best) * 5.0 - 2.0
    assert verify(draft, logits) == expected


def test_greedy_all_prefixes_exhaustive() -> None:
    vocab, k = 3, 3
    rng = np.random.default_rng(0)
    for code in range(vocab ** (2 * k + 1)):
        digits = [(code // vocab**j) % vocab for j in range(2 * k + 1)]
        draft, best = digits[:k], digits[k:]
        logits = rng.normal(size=(k + 1, vocab))
        logits[np.arange(k + 1), best] = 10.0
        n = next((i for i in range(k) if draft[i] != best[i]), k)
        assert verify(draft, logits) == Verdict(n, best[n])


def test_greedy_ties_resolve_like_argmax() -> None:
    logits = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    assert verify([2], logits) == Verdict(0, 1)  # tie between 1 and 2: argmax takes 1
    assert verify([1], logits) == Verdict(1, 0)


def test_greedy_accepts_numpy_tokens_and_neg_inf() -> None:
    logits = np.full((3, 5), -np.inf, dtype=np.float32)
    logits[0, 4] = logits[1, 2] = logits[2, 0] = 1.0
    assert verify(np.array([4, 2]), logits) == Verdict(2, 0)


@pytest.mark.parametrize(
    ("draft", "target", "kwargs", "match"),
    [
        ([1], np.zeros(4), {}, "2-D"),
        ([1, 2], np.zeros((2, 4)), {}, "needs 3"),
        ([7], np.zeros((2, 4)), {}, "outside the vocabulary"),
        ([1], np.full((2, 4), 0.25),
         {"draft_probs": np.full((2, 4), 0.25), "rng": np.random.default_rng(0)}, "shape"),
        ([1], np.full((2, 4), 0.25), {"draft_probs": np.full((1, 4), 0.25)}, "only used when sampling"),
        ([1], np.zeros((2, 4)), {"rng": np.random.default_rng(0)}, "not a probability distribution"),
        ([1], np.full((2, 4), 0.5), {"rng": np.random.default_rng(0)}, "not a probability distribution"),
    ],
)
def test_validation_errors(draft, target, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        verify(draft, target, **kwargs)


# ---------------------------------------------------------------- sampling

def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson statistic over cells with positive expected mass; cells with none must be empty."""
    counts = np.asarray(counts, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    assert counts[probs == 0].sum() == 0, "emitted a token the target gives zero probability"
    mask = probs > 0
    expected = counts.sum() * probs[mask]
    return float(((counts[mask] - expected) ** 2 / expected).sum()), int(mask.sum()) - 1


def random_chain(rng: np.random.Generator, vocab: int, zero_frac: float = 0.0) -> np.ndarray:
    """A Markov next-token matrix: row ``a`` is the distribution of the token after ``a``."""
    m = rng.dirichlet(np.full(vocab, 0.8), size=vocab)
    if zero_frac:
        m[rng.random(m.shape) < zero_frac] = 0.0
        m[np.arange(vocab), rng.integers(0, vocab, vocab)] += 0.05  # keep every row non-empty
        m /= m.sum(axis=1, keepdims=True)
    return m


def emit_two(p_chain, q_chain, k, rng, *, with_probs: bool, sampler=verify) -> tuple[int, int]:
    """Run verification passes from token 0 until two tokens are emitted (as the real loop would)."""
    out: list[int] = []
    last = 0
    while len(out) < 2:
        draft, ctx = [], last
        for _ in range(k):
            ctx = int(rng.choice(len(q_chain), p=q_chain[ctx]))
            draft.append(ctx)
        context = [last, *draft]
        target = p_chain[context]                 # (k+1, V): row i judges the token after context[i]
        probs = q_chain[context[:-1]] if with_probs else None
        v = sampler(draft, target, draft_probs=probs, rng=rng)
        out += [*draft[: v.n_accepted], v.next_token]
        last = out[-1]
    return out[0], out[1]


def check_two_token_law(p_chain, q_chain, k, *, with_probs, trials, seed,
                        sampler=verify) -> tuple[float, float]:
    """Chi-square statistics of the first token's and second token's marginals vs the target's."""
    vocab = len(p_chain)
    rng = np.random.default_rng(seed)
    joint = np.zeros((vocab, vocab))
    for _ in range(trials):
        a, b = emit_two(p_chain, q_chain, k, rng, with_probs=with_probs, sampler=sampler)
        joint[a, b] += 1
    first_law = p_chain[0]
    second_law = first_law @ p_chain  # sum_a P(a | 0) P(b | a)
    stat1, df1 = chi_square(joint.sum(axis=1), first_law)
    stat2, df2 = chi_square(joint.sum(axis=0), second_law)
    return stat1 / CHI2_CRIT_999[df1], stat2 / CHI2_CRIT_999[df2]


@pytest.mark.parametrize(
    ("vocab", "k", "with_probs", "zero_frac", "seed"),
    [
        (4, 1, True, 0.0, 1),
        (5, 2, True, 0.3, 2),   # q (and p) with zero mass where the other has mass
        (6, 3, True, 0.0, 3),
        (4, 1, False, 0.0, 4),
        (5, 3, False, 0.3, 5),
    ],
)
def test_sampling_preserves_target_marginals(vocab, k, with_probs, zero_frac, seed) -> None:
    setup = np.random.default_rng(100 + seed)
    p_chain = random_chain(setup, vocab, zero_frac)
    q_chain = random_chain(setup, vocab, zero_frac)
    r1, r2 = check_two_token_law(p_chain, q_chain, k, with_probs=with_probs, trials=8000, seed=seed)
    assert r1 < 1.0 and r2 < 1.0, (r1, r2)


def test_chi_square_harness_detects_a_biased_sampler() -> None:
    """The statistic has power: always accepting the draft (emitting q, not p) is caught."""
    setup = np.random.default_rng(7)
    p_chain, q_chain = random_chain(setup, 5), random_chain(setup, 5)

    def accept_all(draft, target, *, draft_probs, rng):
        return Verdict(len(draft), int(np.argmax(target[-1])))

    r1, _ = check_two_token_law(p_chain, q_chain, 2, with_probs=True, trials=8000, seed=7, sampler=accept_all)
    assert r1 > 1.0


def test_draft_with_zero_draft_mass_where_target_has_mass() -> None:
    """q puts no mass on token 3; p does. Token 3 can only come from the residual, at rate p(3)."""
    p = np.array([0.1, 0.2, 0.3, 0.4])
    q = np.array([0.5, 0.5, 0.0, 0.0])
    rng = np.random.default_rng(11)
    counts = np.zeros(4)
    trials = 20000
    for _ in range(trials):
        d = int(rng.choice(4, p=q))
        v = verify([d], np.stack([p, p]), draft_probs=q[None, :], rng=rng)
        counts[d if v.n_accepted else v.next_token] += 1
    stat, df = chi_square(counts, p)
    assert stat < CHI2_CRIT_999[df]


def test_equal_distributions_always_accept() -> None:
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(6), size=4)
    for _ in range(500):
        draft = [int(rng.choice(6, p=row)) for row in p[:3]]
        v = verify(draft, p, draft_probs=p[:3], rng=rng)
        assert v.n_accepted == 3


def test_sampling_never_emits_zero_mass_tokens() -> None:
    rng = np.random.default_rng(5)
    p = np.array([[0.0, 0.5, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0]])
    q = np.array([[1.0, 0.0, 0.0, 0.0]])
    for _ in range(300):
        v = verify([0], p, draft_probs=q, rng=rng)
        assert v.n_accepted == 0 and v.next_token in (1, 3)
        w = verify([0], p, rng=rng)
        assert w.n_accepted == 0 and w.next_token in (1, 3)


def test_sampling_k0_samples_row_zero() -> None:
    rng = np.random.default_rng(9)
    p = np.array([[0.2, 0.0, 0.8]])
    counts = np.zeros(3)
    for _ in range(5000):
        counts[verify([], p, rng=rng).next_token] += 1
    stat, df = chi_square(counts, p[0])
    assert stat < CHI2_CRIT_999[df]


def test_sampling_is_reproducible_with_seed() -> None:
    p = np.random.default_rng(0).dirichlet(np.ones(5), size=3)
    a = [verify([1, 2], p, draft_probs=p[:2][::-1], rng=np.random.default_rng(42)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
