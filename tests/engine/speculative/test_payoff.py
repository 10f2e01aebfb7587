"""The payoff ledger: drafts that keep losing time silence their source; drafts that pay never do."""

import pytest

from engine.speculative.controller import CostModel
from engine.speculative.payoff import PayoffLedger, PayoffParams

# A CPU-like curve: one step costs 1, each extra token in the batch half a step.
CPU = CostModel(((1, 1.0), (2, 1.5), (65, 33.0)))


def lose(ledger: PayoffLedger, times: int) -> None:
    for _ in range(times):
        ledger.record(4, 0)


def test_gain_is_the_time_saved_against_plain_decoding():
    ledger = PayoffLedger(CPU)
    assert ledger.record(4, 4) == pytest.approx(5 * 1.0 - CPU.verify_cost(5))  # 5 tokens, 1 pass
    assert ledger.record(4, 0) == pytest.approx(1.0 - CPU.verify_cost(5))  # 1 token, dearer pass
    drafted = PayoffLedger(CPU.with_draft_cost(0.25))
    assert drafted.record(2, 2) == pytest.approx(3.0 - CPU.verify_cost(3) - 2 * 0.25)


def test_a_losing_streak_brings_quiet_spells_that_double_while_it_goes_on():
    ledger = PayoffLedger(CPU, PayoffParams(streak=3, quiet_min=4, quiet_max=16))
    lose(ledger, 2)
    assert ledger.allows()  # two losses are not a streak
    lose(ledger, 1)
    assert [ledger.allows() for _ in range(5)] == [False] * 4 + [True]
    lose(ledger, 3)  # the probes lost again: twice as long
    assert [ledger.allows() for _ in range(9)] == [False] * 8 + [True]
    for _ in range(3):
        lose(ledger, 3)
        while not ledger.allows():
            pass
    assert ledger.spell == 16  # capped at quiet_max


def test_single_losses_between_paying_drafts_never_silence_a_copy():
    ledger = PayoffLedger(CPU)
    for _ in range(50):
        assert ledger.allows()
        ledger.record(8, 8)
        lose(ledger, 2)  # a copy broken by an edit: a loss or two, then it pays again
    assert ledger.quiet_left == 0


def test_a_paying_draft_resets_the_spell_and_a_new_reply_starts_afresh():
    ledger = PayoffLedger(CPU)
    lose(ledger, 6)
    assert ledger.spell == 4 * PayoffParams().quiet_min  # two spells: 4, then 8 (next: 16)
    ledger.record(8, 8)
    assert ledger.spell == PayoffParams().quiet_min
    lose(ledger, 3)
    assert ledger.quiet_left > 0 and ledger.saved_s < 0
    ledger.reset()
    assert ledger.allows() and ledger.quiet_left == 0 and ledger.saved_s == 0


def test_measured_time_counts_what_the_curve_does_not():
    ledger = PayoffLedger(CPU)
    # By the curve, 4 drafts with 3 accepted pay (4 - 3 = +1 step); a draft model that took
    # 2 steps to catch up and propose makes the same pass a loss.
    assert ledger.record(4, 3) > 0
    assert ledger.record(4, 3, seconds=CPU.verify_cost(5) + 2.0) < 0
