"""The policy: for each target pass, which drafter drafts and how many tokens (zero included).

The n-gram drafter's copy (engine.decode.speculative.ngram) gets the length with the most expected
tokens per second (engine.decode.speculative.controller). A draft model's tokens are taken to be accepted
at ``model_alpha`` (its ``p_min`` stops it where unsure), which fixes its length on this machine,
zero where even that cannot pay (a CPU). ``auto`` asks the n-gram drafter first. A payoff ledger
per drafter (engine.decode.speculative.payoff) keeps either from being slower than plain decoding.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import replace

from engine.decode.sampling import Sampler
from engine.decode.speculative import calibration
from engine.decode.speculative.compat import check_pair
from engine.decode.speculative.controller import CostModel, CostTrack, best_length
from engine.decode.speculative.draft import Draft
from engine.decode.speculative.draft_model import CURVE_SIZES, ModelDrafter, draft_costs
from engine.decode.speculative.ngram import NgramDrafter
from engine.decode.speculative.params import SpeculativeParams
from engine.decode.speculative.payoff import PayoffLedger
from engine.decode.speculative.tuning import TUNING, Tuning
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.media import has_media, is_media
from engine.llama.model import Model, ModelSpec

log = logging.getLogger(__name__)


class Speculation:
    """The generator's ``Speculation`` over one or two drafters (``params.adaptive`` off: drafts
    as long as asked, never held back), and what it owns: the draft model and its context (when
    one is used), why a configured draft model was refused. ``track`` follows what passes cost
    now against the curve (engine.decode.speculative.controller.CostTrack); the n-gram drafter's
    lengths and ledger go by it."""

    draft_model: Model | None = None
    draft_ctx: LlamaSequence | None = None
    draft_problem: str | None = None

    def __init__(self, params: SpeculativeParams, cost: CostModel | None, *,
                 ngram: NgramDrafter | None = None, model: ModelDrafter | None = None,
                 draft_cost_s: float = 0.0, draft_pass_s: float = 0.0, draft_read_s: float = 0.0,
                 eog_ids: frozenset[int] = frozenset(), tuning: Tuning = TUNING,
                 on_mismatch: Callable[[float], None] | None = None) -> None:
        """``cost`` None: the verify-cost curve is not measured yet; until ``set_cost`` gives
        it, an adaptive speculation drafts nothing (plain decoding). ``on_mismatch``: called
        once when passes cost far from the curve (``CostTrack``)."""
        self.params, self.eog_ids, self.tuning = params, eog_ids, tuning
        self.on_mismatch = on_mismatch
        self.name = params.drafter
        self._alpha = [tuning.model_alpha ** j for j in range(1, params.draft_max + 1)]  # a draft model's survival
        self.ngram, self.model = ngram, model
        self._reply_from = 0  # where the reply under way began (``begin``)
        self._sees_all = True  # the draft model can read the whole prompt (no images in it)
        self.set_cost(cost, draft_cost_s, draft_pass_s, draft_read_s)

    def set_cost(self, cost: CostModel | None, draft_cost_s: float = 0.0,
                 draft_pass_s: float = 0.0, draft_read_s: float = 0.0) -> None:
        """The verify-cost curve (and what a draft model's token and pass cost, and a token of
        the prompt it reads before its first draft) the draft lengths are chosen by from the next
        proposal on."""
        self.cost = cost
        self.ledgers: dict[str, PayoffLedger] = {}
        self.model_len = 0  # the draft model's length where it can pay
        self.model_saves_s = 0.0  # what that saves a token against plain decoding
        self.draft_read_s = draft_read_s
        self.track: CostTrack | None = None
        if cost is None:
            return
        self.track = CostTrack(cost, self.on_mismatch)
        self.ledgers["ngram"] = PayoffLedger(cost, self.tuning)
        if self.model is not None:
            model_cost = replace(cost, draft_s_per_token=draft_cost_s, draft_s_per_pass=draft_pass_s)
            self.ledgers["model"] = PayoffLedger(model_cost, self.tuning)
            self.model_len = best_length(model_cost, self._alpha)
            if self.model_len:
                emitted = 1 + sum(self._alpha[:self.model_len])
                self.model_saves_s = cost.pass_cost(0) - model_cost.pass_cost(self.model_len) / emitted
            if not self.model_len and self.params.drafter == "auto":
                log.info("the draft model cannot pay on this machine (%.0f ms per draft token); "
                         "auto leaves it unused", draft_cost_s * 1000)

    def begin(self, prompt: Sequence[int]) -> None:
        self._reply_from = len(prompt)
        # a draft model reads text only: it never drafts after images it did not see (the
        # n-gram drafter, over the text, still does)
        self._sees_all = not has_media(prompt)
        for ledger in self.ledgers.values():
            ledger.reset()
        if self.ngram is not None:
            self.ngram.begin(prompt)

    def plan(self, history: Sequence[int], room: int, sampler: Sampler, width: int = 0,
             forced: int = 0) -> Draft:
        """A draft for the next pass; ``width``: tokens other sequences already put in it;
        ``forced``: how many of the history's last tokens a grammar forced (in this pass)."""
        k_max = min(self.params.draft_max, room)
        adaptive, k_min = self.params.adaptive, self.params.draft_min
        if k_max < k_min or (adaptive and self.track is None):
            return Draft()
        if self.ngram is not None:
            draft = _end_at_eog(self.ngram.propose(history, k_max, forced), self.eog_ids)
            k = best_length(self.track.cost, draft.survival, width) \
                if adaptive and self.track is not None else len(draft.tokens)
            if k >= k_min and (not adaptive or self.ledgers["ngram"].allows()):
                return replace(draft, tokens=draft.tokens[:k], survival=draft.survival[:k])
        if self.model is not None and self._sees_all and (self.model_len or self.name == "model"):
            k = k_max  # as asked where it cannot pay alone (``drafter="model"``), else as long as pays here
            if adaptive and self.model_len:
                k = best_length(self.ledgers["model"].cost, self._alpha[:k_max], width) \
                    if self._catch_up_pays(history, room) else 0
            if k >= k_min and (not adaptive or self.ledgers["model"].allows()):
                draft = self.model.propose(history, k, sampler)
                if len(draft.tokens) >= k_min:
                    return draft
                if adaptive:
                    self.ledgers["model"].wasted(draft.seconds)
        return Draft()

    def _catch_up_pays(self, history: Sequence[int], room: int) -> bool:
        """Whether the draft model's reading what it has not seen (a new conversation's whole
        prompt) is likely repaid in this reply: a reply that has run g tokens is taken to run
        about g more (no more than ``room``), each saving ``model_saves_s``. So a short reply
        never pays a long prompt's reading, and a long one does once it has shown it is long."""
        assert self.model is not None
        behind = self.model.behind(history)
        if behind <= 2:  # the correction and the last accepted token: part of every pass
            return True
        ahead = min(room, max(0, len(history) - self._reply_from))
        return ahead * self.model_saves_s >= behind * self.draft_read_s

    def observe(self, draft: Draft, n_accepted: int, verify_s: float, lone: bool = True) -> None:
        """A pass done: its draft (empty for a plain step), how much of it was accepted, what
        the pass took (or this draft's share of it); ``lone``: nothing else was in the pass."""
        if lone and self.track is not None:
            self.track.observe(len(draft.tokens) + 1, verify_s)
            if "ngram" in self.ledgers:
                self.ledgers["ngram"].cost = self.track.cost
        if self.params.adaptive and draft.tokens and draft.source in self.ledgers:
            self.ledgers[draft.source].record(len(draft.tokens), n_accepted, draft.seconds + verify_s)

    def reset(self) -> None:
        if self.ngram is not None:
            self.ngram.reset()

    def close(self) -> None:
        for obj in (self.draft_ctx, self.draft_model):
            if obj is not None:
                obj.close()
        self.draft_ctx = self.draft_model = None


def _end_at_eog(draft: Draft, eog_ids: frozenset[int]) -> Draft:
    """A reply ends at its first end-of-generation token: nothing after it is worth verifying.
    A copy stops before an image's position (a reply is text: engine.llama.media)."""
    for i, tok in enumerate(draft.tokens):
        if is_media(tok):
            return replace(draft, tokens=draft.tokens[:i], survival=draft.survival[:i])
        if tok in eog_ids:
            return replace(draft, tokens=draft.tokens[:i + 1], survival=draft.survival[:i + 1])
    return draft


def build_speculation(target: Model, ctx: LlamaSequence, draft_spec: ModelSpec | None,
                      params: SpeculativeParams, draft_context: ContextParams | None = None,
                      on_calibrate: Callable[[], None] | None = None, *,
                      measure: bool = True, cancel: threading.Event | None = None) -> Speculation:
    """Load the draft model if configured (refusing an incompatible one), calibrate, assemble.
    ``on_calibrate`` is called before a verify-cost curve is measured (not when it is cached).
    ``measure`` False: a curve that is not cached is not measured here; the speculation then
    has no cost (plain decoding) until ``engine.decode.speculative.later`` measures and gives it.
    ``cancel``: stops the draft model's load (engine.llama.model.Model)."""
    draft_model = draft_ctx = model_drafter = problem = None
    draft_cost = draft_pass = draft_read = 0.0
    with ExitStack() as owned:  # closed unless the whole assembly succeeds
        if draft_spec is not None and params.drafter in ("model", "auto"):
            draft_model = owned.enter_context(Model(draft_spec, cancel))
            problem = check_pair(target, draft_model)
            if problem is not None:
                problem = f"the draft model cannot be used with this target: {problem}"
                log.warning("%s; using the n-gram drafter", problem)
                owned.close()  # the draft model, unused
                draft_model = None
            else:
                draft_params = draft_context or replace(ctx.params, n_ctx=ctx.n_ctx)
                draft_ctx = owned.enter_context(LlamaSequence(draft_model, draft_params))
                model_drafter = ModelDrafter(draft_ctx, params.p_min)
        ngram = None
        if params.drafter in ("ngram", "auto") or (params.drafter == "model" and model_drafter is None):
            ngram = NgramDrafter(target, ngram_min=params.ngram_min, ngram_max=params.ngram_max)

        def curve(c: LlamaSequence, sizes: tuple[int, ...]) -> CostModel | None:
            return calibration.cached_cost(c, sizes, on_calibrate) if measure else calibration.lookup(c, sizes)

        # per draft token: one step; per pass: the correction and the last accepted draft token,
        # taken in as one batch of two
        draft_curve = curve(draft_ctx, CURVE_SIZES) if draft_ctx is not None else None
        cost = curve(ctx, TUNING.calibration_sizes)
        if draft_curve is not None:
            draft_cost, draft_pass, draft_read = draft_costs(draft_curve)
        elif draft_ctx is not None:
            cost = None  # both curves come together, later
        owned.pop_all()

    def mismatch(ratio: float) -> None:  # a curve far off is measured again at the next load
        log.warning("verification passes cost %.1fx what the calibration measured (taken while "
                    "the machine was busy?): it is measured again at the next load", ratio)
        calibration.forget(ctx)

    spec = Speculation(params, cost, ngram=ngram, model=model_drafter, draft_cost_s=draft_cost,
                       draft_pass_s=draft_pass, draft_read_s=draft_read, eog_ids=target.eog_ids,
                       on_mismatch=mismatch)
    spec.draft_model, spec.draft_ctx, spec.draft_problem = draft_model, draft_ctx, problem
    return spec
