"""engine.speculative.reliability: per-match-length copy statistics and draft survival (pure)."""

import pytest

from engine.speculative.reliability import PRIORS, MatchReliability


def test_buckets_split_short_matches_by_nearness() -> None:
    b = MatchReliability.bucket
    assert [b(m) for m in (0, 3, 4, 7, 8, 15, 16, 31, 32, 99)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert b(2, near=True) != b(2) and b(6, near=True) != b(6)
    assert b(8, near=True) == b(8)  # long agreements share one set of statistics


def test_estimate_starts_at_the_prior_and_follows_evidence() -> None:
    r = MatchReliability()
    assert r.p(20) == pytest.approx(PRIORS[3])
    for _ in range(50):
        r.observe(20, False, True)
    assert r.p(20) > 0.97
    for _ in range(50):
        r.observe(20, False, False)
    assert r.p(20) < 0.5  # recent behaviour counts most
    assert r.p(2) == pytest.approx(PRIORS[0])  # other buckets untouched


def test_survival_is_a_product_along_the_growing_match() -> None:
    r = MatchReliability()
    s = r.survival(6, False, [(0, 1)] * 5)
    expected, acc = [], 1.0
    for m in range(6, 11):
        acc *= r.p(m)
        expected.append(acc)
    assert s == pytest.approx(expected)
    assert all(a >= b for a, b in zip(s, s[1:]))


def test_a_copy_that_broke_after_a_context_is_trusted_less_past_it() -> None:
    r = MatchReliability()
    for _ in range(3):
        r.observe(32, False, False, after=(3, 4))  # copies broke right after (3, 4)
    r.observe(32, False, True, after=(1, 2))
    damped = r.survival(32, False, [(1, 2), (3, 4), (5, 6)])
    assert damped[0] == pytest.approx(r.p(32))  # nothing broke after (1, 2)
    assert damped[1] < 0.5 * damped[0]
    assert r.q((3, 4)) < 0.5 and r.q((1, 2)) == 1.0 and r.q((9, 9)) == 1.0


def test_short_guesses_do_not_teach_context_statistics() -> None:
    r = MatchReliability()
    r.observe(3, False, False, after=(3, 4))
    assert r.q((3, 4)) == 1.0


def test_reset_and_bad_decay() -> None:
    r = MatchReliability()
    r.observe(40, False, False, after=(1, 1))
    r.reset()
    assert r.p(40) == pytest.approx(PRIORS[4]) and r.q((1, 1)) == 1.0
    with pytest.raises(ValueError):
        MatchReliability(decay=0.0)
