"""The accept step (engine.decode.speculative.accept.accept) with the sampler's own pick rule: exhaustive
greedy cases, and sampled drafts accepted exactly where plain sampling draws the same token, so a
seeded reply is the same with and without drafts and every token is a sample of the target."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from engine.decode.sampling import Sampler, SamplingParams
from engine.decode.speculative.accept import Verdict, accept

# 0.999 quantiles of the chi-square distribution (p = 0.001), by degrees of freedom.
CHI2_CRIT_999 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467}


def greedy(rows: np.ndarray) -> Callable[[int], int]:
    return lambda i: int(np.argmax(rows[i]))


def one_hot_rows(best: list[int], vocab: int = 6) -> np.ndarray:
    rows = np.zeros((len(best), vocab))
    rows[np.arange(len(best)), best] = 1.0
    return rows


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
    assert accept(draft, greedy(one_hot_rows(best) * 5.0 - 2.0)) == expected


def test_greedy_all_prefixes_exhaustive() -> None:
    vocab, k = 3, 3
    rng = np.random.default_rng(0)
    for code in range(vocab ** (2 * k + 1)):
        digits = [(code // vocab**j) % vocab for j in range(2 * k + 1)]
        draft, best = digits[:k], digits[k:]
        logits = rng.normal(size=(k + 1, vocab))
        logits[np.arange(k + 1), best] = 10.0
        n = next((i for i in range(k) if draft[i] != best[i]), k)
        assert accept(draft, greedy(logits)) == Verdict(n, best[n])


def test_rows_are_picked_in_order_and_never_past_the_first_mismatch() -> None:
    seen: list[int] = []

    def pick(i: int) -> int:
        seen.append(i)
        return [1, 9, 3, 4][i]

    assert accept([1, 2, 3], pick) == Verdict(1, 9)
    assert seen == [0, 1]  # a grammar advanced inside pick sees only accepted tokens


def test_numpy_tokens_compare_as_ints() -> None:
    assert accept(np.array([4, 2]), lambda i: [4, 2, 0][i]) == Verdict(2, 0)


def test_a_seeded_draw_depends_on_the_position_not_on_the_pass() -> None:
    """What plain sampling draws at each position equals what verification picks from the same
    row at that position: drafts change how many positions a pass covers, never the tokens."""
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(40, 50)).astype(np.float32) * 2
    params = SamplingParams(temperature=0.8, top_k=20, top_p=0.95, min_p=0.0, seed=11)
    plain_sampler = Sampler(params)
    history: list[int] = [7, 8]
    for i in range(40):  # plain: one token per "pass"
        history.append(plain_sampler.pick(rows[i], history))
    plain = history[2:]
    sampler = Sampler(params)
    out: list[int] = [7, 8]
    while len(out) - 2 < 40:  # speculative: drafts of a few tokens, right or wrong
        n = len(out) - 2
        k = min(int(rng.integers(0, 6)), 40 - n - 1)
        draft = [plain[n + j] if rng.random() < 0.7 else int(rng.integers(0, 50)) for j in range(k)]
        base = list(out)
        v = accept(draft, lambda i, n=n, base=base, draft=draft: sampler.pick(rows[n + i], base + draft[:i]))
        out += draft[:v.n_accepted] + [v.next_token]
    assert out[2:42] == plain


@pytest.mark.parametrize("top_k, top_p, temperature", [(0, 1.0, 1.0), (3, 1.0, 0.7), (0, 0.8, 1.3)])
def test_each_draw_has_the_target_distribution(top_k: int, top_p: float, temperature: float) -> None:
    """Chi-square over many positions: the Gumbel-max draw samples the chain's distribution."""
    from engine.decode.sampling import distribution

    logits = np.log(np.array([0.35, 0.25, 0.2, 0.12, 0.08], dtype=np.float32))
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=0.0, seed=5)
    ids, probs = distribution(logits, params)
    expected = np.zeros(5)
    expected[ids] = probs
    sampler, n = Sampler(params), 20000
    history: list[int] = []
    counts = np.zeros(5)
    for _ in range(n):
        t = sampler.pick(logits, history)
        counts[t] += 1
        history.append(0)  # the position moves on; the penalty is off
    support = expected > 0
    assert counts[~support].sum() == 0
    chi2 = (((counts - n * expected) ** 2)[support] / (n * expected[support])).sum()
    assert chi2 < CHI2_CRIT_999[int(support.sum()) - 1]


def test_the_chi_square_check_catches_a_biased_draw() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.2], dtype=np.float32))
    counts = np.array([0.56, 0.26, 0.18]) * 20000  # what a slightly biased sampler would give
    expected = np.exp(logits) * 20000
    assert (((counts - expected) ** 2) / expected).sum() > CHI2_CRIT_999[2]


def test_an_unseeded_sampler_draws_its_own_seed() -> None:
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    assert Sampler(params).seed != Sampler(params).seed
    assert Sampler(SamplingParams(seed=7)).seed == 7
