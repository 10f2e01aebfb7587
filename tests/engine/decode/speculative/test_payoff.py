"""The payoff ledger: drafts that keep losing time silence their source; drafts that pay never do."""

from dataclasses import replace

import pytest

from engine.decode.speculative.controller import CostModel
from engine.decode.speculative.payoff import PayoffLedger
from engine.decode.speculative.tuning import TUNING

# A CPU-like curve: one step costs 1, each extra token in the batch half a step.
CPU = CostModel(((1, 1.0), (2, 1.5), (65, 33.0)))


def lose(ledger: PayoffLedger, times: int) -> None:
    for _ in range(times):
        ledger.record(4, 0)


def test_gain_is_the_time_saved_against_plain_decoding() -> None:
    ledger = PayoffLedger(CPU)
    assert ledger.record(4, 4) == pytest.approx(5 * 1.0 - CPU.verify_cost(5))  # 5 tokens, 1 pass
    assert ledger.record(4, 0) == pytest.approx(1.0 - CPU.verify_cost(5))  # 1 token, dearer pass
    drafted = PayoffLedger(replace(CPU, draft_s_per_token=0.25))
    assert drafted.record(2, 2) == pytest.approx(3.0 - CPU.verify_cost(3) - 0.5)
    # measured time counts what the curve does not (a draft model catching up, say)
    assert ledger.record(4, 3) > 0 > ledger.record(4, 3, seconds=CPU.verify_cost(5) + 2.0)


def test_a_losing_streak_brings_quiet_spells_that_double_while_it_goes_on() -> None:
    ledger = PayoffLedger(CPU, replace(TUNING, loss_streak=3, quiet_max=12))
    lose(ledger, 2)
    assert ledger.allows()  # two losses are not a streak
    lose(ledger, 1)
    assert [ledger.allows() for _ in range(4)] == [False] * 3 + [True]  # as many as the streak
    lose(ledger, 3)  # the probes lost again: twice as long
    assert [ledger.allows() for _ in range(7)] == [False] * 6 + [True]
    for _ in range(3):
        lose(ledger, 3)
        while not ledger.allows():
            pass
    assert ledger.spell == 12  # capped


def test_single_losses_between_paying_drafts_never_silence_a_copy() -> None:
    ledger = PayoffLedger(CPU)
    for _ in range(50):
        assert ledger.allows()
        ledger.record(8, 8)
        lose(ledger, TUNING.loss_streak - 1)  # a copy broken by an edit: a loss or two, then it pays
    assert ledger.quiet_left == 0


def test_a_paying_draft_resets_the_spell_and_a_new_reply_starts_afresh() -> None:
    ledger = PayoffLedger(CPU)
    lose(ledger, 2 * TUNING.loss_streak)
    assert ledger.spell == 4 * TUNING.loss_streak  # two spells so far
    ledger.record(8, 8)
    assert ledger.spell == TUNING.loss_streak
    lose(ledger, TUNING.loss_streak)
    assert ledger.quiet_left > 0 and ledger.saved_s < 0
    ledger.reset()
    assert ledger.allows() and ledger.quiet_left == 0 and ledger.saved_s == 0
