"""The speculator's policy on its own: draft lengths from a proposal's survival, the EOG cut, the
payoff ledger's quiet spells, and when a draft model is used."""

import numpy as np

from engine.decode.sampling import Sampler, SamplingParams
from engine.decode.speculative.controller import CostModel
from engine.decode.speculative.draft import Draft
from engine.decode.speculative.ngram import NgramDrafter
from engine.decode.speculative.params import SpeculativeParams
from engine.decode.speculative.speculator import Speculation, _end_at_eog

CPU = CostModel(((1, .032), (2, .059), (4, .085), (8, .174), (16, .215), (32, .364)))
GPU = CostModel(((1, .010), (2, .010), (4, .0105), (8, .011), (16, .012), (32, .014)))
GREEDY = Sampler(SamplingParams(temperature=0))


class NoModel:
    """A draft model that must not be asked (and holds the whole history)."""

    def behind(self, history: list[int]) -> int:
        return 0

    def propose(self, *args: object) -> Draft:
        raise AssertionError("the draft model was used")


def test_a_copy_is_drafted_long_and_guesses_that_fail_are_not() -> None:
    source = list(range(100, 200))
    spec = Speculation(SpeculativeParams(drafter="ngram"), CPU, ngram=NgramDrafter())
    spec.begin(source)
    assert len(spec.plan(source + source[:40], 64, GREEDY).tokens) >= 15  # a copy going on
    chatty = Speculation(SpeculativeParams(drafter="ngram"), CPU, ngram=NgramDrafter())
    chatty.begin(source)
    reply = np.random.default_rng(0).choice([7, 8, 9], size=200).tolist()  # n-grams recur, not what follows
    planned = [len(chatty.plan(source + reply[:i], 64, GREEDY).tokens) for i in range(100, 200)]
    assert sum(1 for k in planned if k) <= 3, planned


def test_lengths_follow_what_passes_cost_now() -> None:
    source = list(range(100, 200))
    history = source + source[:40]
    spec = Speculation(SpeculativeParams(drafter="ngram"), CPU, ngram=NgramDrafter())
    spec.begin(source)
    before = len(spec.plan(history, 64, GREEDY).tokens)
    for n, seconds in CPU.verify_s:  # every batch now costs what 8 steps did (steps as measured)
        for _ in range(3):
            spec.observe(Draft(tuple(range(n - 1))), 0, seconds if n == 1 else 8 * seconds)
    spec.begin(source)
    after = len(spec.plan(history, 64, GREEDY).tokens)
    assert before >= 15 and after < before


def test_not_adaptive_drafts_all_it_can() -> None:
    source = list(range(100, 200))
    params = SpeculativeParams(drafter="ngram", adaptive=False, draft_max=8)
    spec = Speculation(params, CPU, ngram=NgramDrafter())
    spec.begin(source)
    assert spec.plan(source + source[:2], 64, GREEDY).tokens == tuple(source[2:10])


def test_draft_ends_at_first_eog() -> None:
    draft = Draft((5, 6, 99, 7, 8), source="ngram", match_len=9, survival=(1, 1, 1, 1, 1))
    d = _end_at_eog(draft, frozenset({99}))
    assert d.tokens == (5, 6, 99) and d.match_len == 9 and len(d.survival) == 3
    assert _end_at_eog(Draft((1, 2)), frozenset({99})).tokens == (1, 2)


def test_a_losing_drafter_goes_quiet_until_the_next_reply_unless_asked_for() -> None:
    source = list(range(100, 200))
    history = source + source[:40]
    for adaptive in (True, False):
        spec = Speculation(SpeculativeParams(drafter="ngram", adaptive=adaptive), CPU, ngram=NgramDrafter())
        spec.begin(source)
        draft = spec.plan(history, 64, GREEDY)
        assert len(draft.tokens) >= 15
        for _ in range(3):
            spec.observe(draft, 0, 0.3)  # every drafted token rejected: each pass lost time
        ledger = spec.ledgers["ngram"]
        if adaptive:
            assert ledger.saved_s < 0 and ledger.quiet_left > 0
            assert spec.plan(history, 64, GREEDY).tokens == ()  # the spell holds back a copy too
            spec.begin(source)
            assert spec.plan(history, 64, GREEDY).tokens
        else:
            assert ledger.quiet_left == 0 and spec.plan(history, 64, GREEDY).tokens


def test_auto_uses_a_draft_model_only_where_it_can_pay() -> None:
    auto = SpeculativeParams(drafter="auto")
    cpu = Speculation(auto, CPU, ngram=NgramDrafter(), model=NoModel(), draft_cost_s=0.020)
    assert not cpu.model_len
    assert cpu.plan([1, 2, 3, 4], 10, GREEDY).tokens == ()
    assert Speculation(auto, GPU, model=NoModel(), draft_cost_s=0.001).model_len
    # ... unless taking in each correction costs the draft ten target steps
    assert not Speculation(auto, GPU, model=NoModel(), draft_cost_s=0.001, draft_pass_s=0.1).model_len


def test_a_draft_model_drafts_its_length_or_all_it_is_asked() -> None:
    class Model(NoModel):
        asked: list[int] = []

        def propose(self, history: list[int], k: int, sampler: Sampler) -> Draft:
            self.asked.append(k)
            return Draft((1,) * k, source="model")

    model = Model()
    gpu = Speculation(SpeculativeParams(drafter="auto"), GPU, model=model, draft_cost_s=0.001)
    assert 1 < gpu.model_len < 64
    assert len(gpu.plan([1, 2], 64, GREEDY).tokens) == gpu.model_len
    assert len(gpu.plan([1, 2], 3, GREEDY).tokens) == 3  # no more than the room left
    asked = Speculation(SpeculativeParams(drafter="model", draft_max=8), CPU, model=model, draft_cost_s=0.020)
    assert not asked.model_len and len(asked.plan([1, 2], 64, GREEDY).tokens) == 8


def test_a_draft_model_that_offers_nothing_goes_quiet_as_a_losing_one_does() -> None:
    class Unsure(NoModel):
        """Decodes what it has not seen (time spent), then is too unsure to draft a token."""
        asked = 0

        def propose(self, history: list[int], k: int, sampler: Sampler) -> Draft:
            self.asked += 1
            return Draft((), source="model", seconds=0.020)

    for adaptive in (True, False):
        model = Unsure()
        spec = Speculation(SpeculativeParams(drafter="model", adaptive=adaptive), CPU, model=model,
                           draft_cost_s=0.020)
        for _ in range(20):
            assert spec.plan([1, 2], 64, GREEDY).tokens == ()
        if adaptive:  # two empty proposals, then quiet for 2, again 2, quiet for 4, ...
            assert model.asked < 12 and spec.ledgers["model"].saved_s < 0
        else:
            assert model.asked == 20


def test_a_draft_model_that_pays_alone_is_not_used_where_a_wide_batch_makes_it_lose() -> None:
    steep = CostModel(((1, .010), (2, .011), (4, .040), (8, .080), (16, .160)))  # cheap alone, dear wide
    spec = Speculation(SpeculativeParams(drafter="auto"), steep, model=NoModel(), draft_cost_s=0.0001)
    assert spec.model_len == 1
    assert spec.plan([1, 2], 64, GREEDY, width=3).tokens == ()  # three others' tokens in the pass


def test_a_draft_model_reads_a_long_prompt_only_once_the_reply_has_run_long_enough_to_repay_it() -> None:
    class Behind(NoModel):
        """Holds the history as far as its last draft."""
        seen = 0

        def behind(self, history: list[int]) -> int:
            return len(history) - self.seen

        def propose(self, history: list[int], k: int, sampler: Sampler) -> Draft:
            self.seen = len(history)
            return Draft((1,) * k, source="model")

    model = Behind()
    spec = Speculation(SpeculativeParams(drafter="auto"), GPU, model=model, draft_cost_s=0.001,
                       draft_read_s=0.0005)
    assert spec.model_len and spec.model_saves_s > 0
    prompt = list(range(1000))
    spec.begin(prompt)
    history = list(prompt)
    while not spec.plan(history, 10_000, GREEDY).tokens:
        history.append(7)
    # a reply of g tokens is taken to run g more: reading the prompt (and the reply so far) pays
    # once g tokens' savings cover it
    g = len(history) - len(prompt)
    assert (g - 1) * spec.model_saves_s < len(history) * 0.0005 <= g * spec.model_saves_s
    # the next reply in the conversation: the draft model is behind by its last draft and the new
    # message only, so it drafts after a few tokens
    first = g
    prompt = history + [1] * 20
    spec.begin(prompt)
    history = list(prompt)
    while not spec.plan(history, 10_000, GREEDY).tokens:
        history.append(7)
    assert len(history) - len(prompt) < first / 10
    # ... and a reply near its end (little room left) does not pay a long reading
    spec.begin(list(range(5000)))
    assert not spec.plan(list(range(5000)) + [7] * 3000, 10, GREEDY).tokens
