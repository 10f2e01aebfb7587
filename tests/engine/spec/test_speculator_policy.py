"""The speculator's pure policy: n-gram tiers from the cost curve, EOG cut, auto and the draft cost."""

from engine.sampling import Sampler, SamplingParams
from engine.spec.controller import CostModel
from engine.spec.draft import Draft
from engine.spec.ngram import NgramDrafter
from engine.spec.params import SpeculativeParams
from engine.spec.speculator import NgramPolicy, Speculator, _end_at_eog

CPU = CostModel(((1, .032), (2, .059), (4, .085), (8, .174), (16, .215), (32, .364)))
GPU = CostModel(((1, .010), (2, .010), (4, .0105), (8, .011), (16, .012), (32, .014)))


def test_tier_sizes_follow_the_cost_curve():
    cpu, gpu = NgramPolicy(CPU, 32), NgramPolicy(GPU, 32)
    assert cpu.long_k >= 16 and cpu.short_k <= 3 and cpu.mid_k < cpu.long_k
    assert gpu.long_k == 32 and gpu.short_k == 32


def test_weak_matches_are_not_drafted_and_failing_tiers_switch_off():
    p = NgramPolicy(CPU, 32)
    assert p.choose(match_len=2, available=20) == 0
    assert p.choose(match_len=6, available=20) == p.mid_k  # long tier before it has paid
    p.update(p.mid_k, 0)
    assert p.choose(match_len=6, available=20) == 0  # switched off after a loss


def test_long_tier_after_it_pays():
    p = NgramPolicy(CPU, 32)
    k = p.choose(match_len=10, available=40)
    p.update(k, k)
    assert p.choose(match_len=10, available=40) == p.long_k


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
