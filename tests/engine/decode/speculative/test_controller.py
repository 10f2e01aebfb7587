"""Tests of engine.decode.speculative.controller: the cost curve and its cache format, the draft length
against CPU and GPU curves, and the copy odds."""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.decode.speculative.controller import CopyOdds, CostModel, CostTrack, best_length
from engine.decode.speculative.tuning import TUNING

# 1.5B target on the 2-core CPU: batch of n tokens -> seconds.
CPU = CostModel(((1, 0.032), (4, 0.085), (8, 0.174), (16, 0.215), (32, 0.364)))
# A GPU: every batch costs about one step.
GPU = CostModel(((1, 0.020), (2, 0.0202), (4, 0.0205), (8, 0.021), (16, 0.022), (32, 0.025)))


def test_interpolation_and_extrapolation() -> None:
    assert CPU.verify_cost(1) == pytest.approx(0.032)
    assert CPU.verify_cost(2) == pytest.approx(0.032 + 0.053 / 3)
    assert CPU.verify_cost(6) == pytest.approx((0.085 + 0.174) / 2)
    assert CPU.verify_cost(48) == pytest.approx(0.364 + 16 * (0.364 - 0.215) / 16)
    assert CostModel(((1, 0.03),)).verify_cost(5) == pytest.approx(0.15)
    falling = CostModel(((1, 0.02), (8, 0.03), (16, 0.029)))  # a noisy tail never extrapolates down
    assert falling.verify_cost(100) == pytest.approx(0.029)
    assert replace(CPU, draft_s_per_token=0.01, draft_s_per_pass=0.02).pass_cost(3) == CPU.verify_cost(4) + 0.03 + 0.02
    assert replace(CPU, draft_s_per_token=0.01, draft_s_per_pass=0.02).pass_cost(0) == CPU.verify_cost(1)


def test_points_are_sorted_and_validated() -> None:
    assert CostModel(((4, 0.08), (1, 0.03))).verify_s == ((1, 0.03), (4, 0.08))
    for bad in [(), ((2, 0.1),), ((1, 0.1), (1, 0.2)), ((1, 0.0),), ((1, float("nan")),)]:
        with pytest.raises(ValueError):
            CostModel(bad)
    with pytest.raises(ValueError):
        CostModel(((1, 0.1),), draft_s_per_token=-1.0)
    with pytest.raises(ValueError):
        CPU.verify_cost(0)


def test_a_wide_batch_makes_drafting_dearer_on_a_cpu_not_on_a_gpu() -> None:
    likely = [0.8 ** j for j in range(1, 41)]
    alone = best_length(CPU, likely)
    assert alone > 0
    assert best_length(CPU, likely, width=0) == alone  # one client: the lone choice
    assert best_length(CPU, likely, width=3) < alone  # three others in the pass: a token is dearer
    assert best_length(GPU, likely, width=3) > 0  # a GPU's wide batch still costs about one step
    assert best_length(CPU, [1.0] * 40, width=31) == 0  # no calibrated size is left beside them
    # the rate compared is the whole batch's: the others' tokens count on both sides
    k = best_length(CPU, likely, width=3)
    rate = lambda j: (4 + sum(likely[:j])) / CPU.pass_cost(j, 3)  # noqa: E731
    assert all(rate(k) >= rate(j) for j in {s - 4 for s, _ in CPU.verify_s if 1 <= s - 4 <= 28} | {0})


def test_draft_length_follows_survival_and_the_cost_curve() -> None:
    sure, coin = [1.0] * 40, [0.5 ** j for j in range(1, 41)]
    assert best_length(CPU, sure) == 31  # the largest calibrated batch that fits
    assert best_length(CPU, coin) == 0  # a guess does not pay on a CPU
    assert best_length(GPU, coin) > 0  # but nearly free batches do
    assert best_length(CPU, [1.0] * 10) == 10  # a short draft is taken whole
    assert best_length(CPU, [1.0] * 200) == 31  # never past the calibrated sizes
    assert best_length(CPU, []) == 0
    assert best_length(CPU, [0.9 ** j for j in range(1, 17)]) in {s - 1 for s, _ in CPU.verify_s}
    # a draft model's cost per token can make even a sure draft lose on a CPU
    assert best_length(replace(CPU, draft_s_per_token=0.65 * 0.032, draft_s_per_pass=0.032), sure) == 0


def test_copy_odds_start_from_the_rule_of_succession_and_follow_the_reply() -> None:
    odds = CopyOdds(replace(TUNING, agree_cap=64))
    assert odds.p(0) == pytest.approx(1 / 2) and odds.p(30) == pytest.approx(31 / 32)
    for _ in range(50):
        odds.observe(20, False)  # this reply does not go on copying at agreements of 16-31
    assert max(odds.p(16), odds.p(20), odds.p(31)) < 0.2  # one count per power of two
    assert odds.p(2) == pytest.approx(3 / 4) and odds.p(32) == pytest.approx(33 / 34)  # the others untouched
    odds.reset()
    assert odds.p(20) == pytest.approx(21 / 22)


def test_a_copy_the_lookup_found_counts_one_agreeing_token_less_below_the_cap() -> None:
    """The lookup chose the source because its last tokens agree: below the cap one of them is
    no evidence; a copy resumed where one broke off, and any copy at the cap, keep the rule."""
    odds = CopyOdds(replace(TUNING, agree_cap=8))
    assert odds.p(2, near=False) == pytest.approx(2 / 4) and odds.p(2, near=True) == pytest.approx(3 / 4)
    assert odds.p(5, near=False) == pytest.approx(5 / 7)
    assert odds.p(8, near=False) == odds.p(20, near=False) == odds.p(8) == pytest.approx(9 / 10)
    found, resumed = (odds.survival(2, [1.0] * 4, [(1, 2)] * 4, near) for near in (False, True))
    assert all(f < r for f, r in zip(found, resumed, strict=True))
    assert found[0] == pytest.approx(2 / 4) and found[1] == pytest.approx(2 / 4 * 3 / 5)


def test_past_the_agreement_cap_only_the_reply_says_a_copy_is_surer() -> None:
    odds = CopyOdds(replace(TUNING, agree_cap=8))
    cap = 9 / 10  # the rule of succession at 8 tokens of agreement
    assert odds.p(8) == pytest.approx(cap) and odds.p(15) == odds.p(40) == pytest.approx(cap)
    survival = odds.survival(7, [1.0] * 15, [(1, 2)] * 15)
    assert survival[-1] < 0.25  # not 8 / 23 (0.35): a long copy is not drafted on hope alone
    for _ in range(40):
        odds.observe(100, True)  # this reply's long copies hold: they share one count
    assert odds.p(9) > 0.97 and odds.p(9) == odds.p(300)
    assert odds.p(4) == pytest.approx(5 / 6)  # shorter agreements keep their own count


def test_a_copy_that_broke_after_two_tokens_is_trusted_less_past_them() -> None:
    odds = CopyOdds()
    assert odds.q((5, 6)) == 1.0  # no copy has broken there
    odds.observe(20, False, (5, 6))
    assert odds.q((5, 6)) == 1 / 2 and odds.q((6, 5)) == 1.0
    odds.observe(20, True, (5, 6))
    assert odds.q((5, 6)) == 2 / 3
    survival = odds.survival(20, [1.0, 1.0, 0.5], [(1, 2), (5, 6), (2, 3)])
    assert survival == pytest.approx((odds.p(20), odds.p(20) * odds.p(21) * 2 / 3,
                                      odds.p(20) * odds.p(21) * 2 / 3 * odds.p(22) * 0.5))


def test_a_curve_far_from_what_passes_cost_is_reported_once() -> None:
    cost = CostModel(((1, 1.0), (2, 1.5), (65, 33.0)))
    seen: list[float] = []
    check = CostTrack(cost, seen.append)
    for _ in range(TUNING.cost_check_passes):
        check.observe(5, 1.1 * cost.verify_cost(5))  # 10% off: the machine's own drift
        check.observe(1, 0.9 * cost.verify_cost(1))
    assert seen == []
    busy = CostTrack(cost, seen.append)  # calibrated while the cores were busy: passes cost 1/3
    for _ in range(3 * TUNING.cost_check_passes):
        busy.observe(3, cost.verify_cost(3) / 3)
    assert seen == [pytest.approx(1 / 3)]
    slow = CostTrack(cost, seen.append)  # steps three times the curve's: reported too
    for _ in range(TUNING.cost_check_passes):
        slow.observe(1, 3.0)
    assert seen[1:] == [pytest.approx(3.0)]


def test_the_tracked_curve_takes_each_size_from_its_own_passes_once_timed_enough() -> None:
    curve = CostModel(((1, 1.0), (2, 1.5), (4, 2.5), (16, 7.0)))
    track = CostTrack(curve)
    for _ in range(4):
        track.observe(1, 1.1)  # steps 10% dearer: the whole curve with them, its shape kept
    assert [s for _, s in track.cost.verify_s] == pytest.approx([1.1, 1.65, 2.75, 7.7])
    track.observe(2, 1.5 * 1.3)
    track.observe(2, 1.5 * 5.0)  # a hiccup
    assert track.cost.verify_cost(2) == pytest.approx(1.65)  # two passes of a size: not yet
    track.observe(2, 1.5 * 1.3)
    assert track.cost.verify_cost(2) == pytest.approx(1.95)  # the median of three: the hiccup ignored
    assert track.cost.verify_cost(4) == pytest.approx(2.5 * 1.3)  # its nearest timed size's
    assert track.cost.verify_cost(16) == pytest.approx(7.0 * 1.3)
    for _ in range(3):
        track.observe(16, 7.0 * 0.8)
    assert track.cost.verify_cost(16) == pytest.approx(5.6)
    assert track.cost.verify_cost(4) == pytest.approx(2.5 * 1.3)  # 2 is nearer 4 than 16 is
    assert track.cost.verify_cost(1) == pytest.approx(1.1) and track.curve is curve


def test_a_spell_that_slows_every_pass_alike_passes_with_the_steps() -> None:
    curve = CostModel(((1, 1.0), (2, 1.5), (16, 7.0)))
    track = CostTrack(curve)
    for _ in range(3):  # a cold start: every pass twice as slow as the curve
        track.observe(1, 2.0)
        track.observe(16, 14.0)
    assert track.cost.verify_cost(16) == pytest.approx(14.0)
    for _ in range(TUNING.cost_check_passes):  # the steps are back; no draft was verified since
        track.observe(1, 1.0)
    assert track.cost.verify_cost(16) == pytest.approx(7.0) and track.cost.verify_cost(2) == pytest.approx(1.5)
