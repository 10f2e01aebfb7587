"""The payoff ledger: drafts that lose time silence their source; drafts that pay never do."""

import pytest

from engine.speculative.controller import CostModel
from engine.speculative.payoff import PayoffLedger, PayoffParams

# A CPU-like curve: one step costs 1, each extra token in the batch half a step.
CPU = CostModel(((1, 1.0), (2, 1.5), (65, 33.0)))


def test_gain_is_the_time_saved_against_plain_decoding():
    ledger = PayoffLedger(CPU)
    assert ledger.record(4, 4) == pytest.approx(5 * 1.0 - CPU.verify_cost(5))  # 5 tokens, 1 pass
    assert ledger.record(4, 0) == pytest.approx(1.0 - CPU.verify_cost(5))  # 1 token, dearer pass
    drafted = PayoffLedger(CPU.with_draft_cost(0.25))
    assert drafted.record(2, 2) == pytest.approx(3.0 - CPU.verify_cost(3) - 2 * 0.25)


def test_a_losing_source_goes_quiet_then_probes_with_doubling_spells():
    p = PayoffParams(quiet_min=4, quiet_max=16)
    ledger = PayoffLedger(CPU, p)
    assert ledger.allows()
    ledger.record(4, 0)  # lost time: quiet for 4 proposals
    assert [ledger.allows() for _ in range(5)] == [False] * 4 + [True]
    ledger.record(4, 0)  # the probe lost again: 8
    assert [ledger.allows() for _ in range(9)] == [False] * 8 + [True]
    for _ in range(3):
        ledger.record(4, 0)
        while not ledger.allows():
            pass
    assert ledger.spell == 16  # capped at quiet_max


def test_a_paying_source_is_never_silenced_and_a_paying_probe_resets_the_spell():
    ledger = PayoffLedger(CPU)
    for _ in range(50):
        assert ledger.allows()
        ledger.record(8, 8)
        ledger.record(8, 3)  # a partial copy between full ones: still ahead on balance
    assert ledger.quiet_left == 0 and ledger.saved_s > 0
    ledger.record(16, 0)
    ledger.record(16, 0)
    assert ledger.quiet_left > 0
    while not ledger.allows():
        pass
    ledger.record(8, 8)  # the probe paid
    assert ledger.spell == PayoffParams().quiet_min


def test_a_strong_match_passes_a_quiet_spell():
    ledger = PayoffLedger(CPU)
    ledger.record(4, 0)
    assert ledger.quiet_left > 0
    assert ledger.allows(match_len=PayoffParams().strong_match)
    assert not ledger.allows(match_len=3)
