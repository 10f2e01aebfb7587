"""The speculator's pure policy: draft lengths from survival and the cost curve, EOG cut, auto
and the draft cost."""

import numpy as np

from engine.sampling import Sampler, SamplingParams
from engine.speculative.controller import CostModel, best_length_by_survival
from engine.speculative.draft import Draft
from engine.speculative.ngram import NgramDrafter
from engine.speculative.params import SpeculativeParams
from engine.speculative.speculator import Speculator, _end_at_eog

CPU = CostModel(((1, .032), (2, .059), (4, .085), (8, .174), (16, .215), (32, .364)))
GPU = CostModel(((1, .010), (2, .010), (4, .0105), (8, .011), (16, .012), (32, .014)))


def test_draft_length_follows_survival_and_the_cost_curve():
    sure, coin = [1.0] * 40, [0.5 ** j for j in range(1, 41)]
    assert best_length_by_survival(CPU, sure) == 31  # the largest calibrated batch that fits
    assert best_length_by_survival(CPU, coin) == 0  # a guess does not pay on a CPU
    assert best_length_by_survival(GPU, coin) > 0  # but nearly free batches do
    assert best_length_by_survival(CPU, [1.0] * 10) == 10  # a short draft is taken whole
    assert best_length_by_survival(CPU, [1.0] * 200) == 31  # never past the calibrated sizes
    assert best_length_by_survival(CPU, []) == 0


def test_a_copy_learned_from_the_reply_is_drafted_long_and_a_guess_not_at_all():
    source = list(range(100, 200))
    spec = Speculator(SpeculativeParams(drafter="ngram"), CPU, ngram=NgramDrafter())
    sampler = Sampler(SamplingParams(temperature=0))
    spec.begin(source)
    # a two-token match is right about half the time (reliability.PRIORS): a guess
    assert spec.plan(source + source[:2], 64, sampler).tokens == ()
    assert len(spec.plan(source + source[:40], 64, sampler).tokens) >= 15  # a copy: a long draft
    chatty = Speculator(SpeculativeParams(drafter="ngram"), CPU, ngram=NgramDrafter())
    chatty.begin(source)
    rng = np.random.default_rng(0)
    reply = [int(t) for t in rng.choice([7, 8, 9], size=200)]  # n-grams recur, continuations do not
    planned = [len(chatty.plan(source + reply[:i], 64, sampler).tokens) for i in range(100, 200)]
    assert sum(1 for k in planned if k) <= 3, planned  # only a rare long coincidence


def test_draft_ends_at_first_eog():
    d = _end_at_eog(Draft((5, 6, 99, 7, 8), source="ngram", match_len=9), frozenset({99}))
    assert d.tokens == (5, 6, 99) and d.match_len == 9
    assert _end_at_eog(Draft((1, 2)), frozenset({99})).tokens == (1, 2)


def test_auto_never_drafts_with_a_model_that_cannot_pay():
    class NoModel:
        def propose(self, *a):  # pragma: no cover - must not be called
            raise AssertionError("the draft model was used")

    spec = Speculator(SpeculativeParams(drafter="auto"), CPU, ngram=NgramDrafter(), model=NoModel(),
                      draft_cost_s=0.020)
    assert not spec.model_can_pay
    assert spec.plan([1, 2, 3, 4], 10, Sampler(SamplingParams(temperature=0))).tokens == ()
    gpu = Speculator(SpeculativeParams(drafter="auto"), GPU, model=NoModel(), draft_cost_s=0.001)
    assert gpu.model_can_pay


def test_a_draft_model_pays_for_taking_in_the_correction_on_every_pass():
    class NoModel:
        def propose(self, *a):  # pragma: no cover - must not be called
            raise AssertionError("the draft model was used")

    # a tenth of a target step per draft token pays on nearly flat batches...
    cheap = Speculator(SpeculativeParams(drafter="auto"), GPU, model=NoModel(), draft_cost_s=0.001)
    assert cheap.model_can_pay
    # ... but not when taking in each correction costs the draft ten target steps
    synced = Speculator(SpeculativeParams(drafter="auto"), GPU, model=NoModel(), draft_cost_s=0.001,
                        draft_pass_s=0.1)
    assert not synced.model_can_pay
    assert CPU.with_draft_cost(0.01, 0.02).pass_cost(3) == CPU.verify_cost(4) + 0.03 + 0.02
    assert CPU.with_draft_cost(0.01, 0.02).pass_cost(0) == CPU.verify_cost(1)


def test_verified_drafts_are_booked_and_a_losing_drafter_goes_quiet():
    source = list(range(100, 200))
    sampler = Sampler(SamplingParams(temperature=0))
    for adaptive in (True, False):
        spec = Speculator(SpeculativeParams(drafter="ngram", adaptive=adaptive), CPU,
                          ngram=NgramDrafter())
        spec.begin(source)
        history = source + source[:40]
        draft = spec.plan(history, 64, sampler)
        assert len(draft.tokens) >= 15
        for _ in range(3):
            spec.observe(draft, 0, 0.3)  # every drafted token rejected: each pass lost time
        ledger = spec.ledgers["ngram"]
        if adaptive:
            assert ledger.saved_s < 0 and ledger.quiet_left > 0
            assert spec.plan(history, 64, sampler).tokens == ()  # the spell holds back a copy too
            spec.begin(source)  # a new reply starts afresh
            assert spec.plan(history, 64, sampler).tokens
        else:  # drafting asked for explicitly: nothing is withheld
            assert ledger.quiet_left == 0 and spec.plan(history, 64, sampler).tokens
