"""Choosing, for each target pass, which drafter drafts and how many tokens (zero included).

The target's verify-cost curve is measured once per model, machine and settings, then cached
(engine.speculative.calibration), and checked against what passes really cost. An n-gram proposal comes with its survival (the estimated probability that each prefix is
accepted, learned from every token of the reply) and gets the length with the highest expected
tokens per second: a long batch for a copy in progress, nothing for a guess. The draft model
has an online acceptance estimate (engine.speculative.controller). ``auto`` asks the n-gram drafter
first (free to draft, strong when the reply copies its context), then the draft model, and
decodes plainly when neither is expected to pay."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Sequence

from engine.context import Context, ContextParams
from engine.model import Model, ModelSpec
from engine.sampling import Sampler
from engine.speculative import calibration
from engine.speculative.controller import (AcceptanceTracker, Controller, CostModel,
                                           best_draft_length, best_length_by_survival)
from engine.speculative.draft import Draft
from engine.speculative.draft_model import ModelDrafter
from engine.speculative.ngram import NgramDrafter, NgramParams
from engine.speculative.params import SpeculativeParams
from engine.speculative.payoff import PayoffLedger

log = logging.getLogger(__name__)

GOOD_DRAFT_ALPHA = 0.9


class Speculator:
    """Implements the generator's ``Speculation`` protocol over one or two drafters."""

    def __init__(self, params: SpeculativeParams, cost: CostModel, *,
                 ngram: NgramDrafter | None = None, model: ModelDrafter | None = None,
                 draft_cost_s: float = 0.0, draft_pass_s: float = 0.0, eog_ids: frozenset[int] = frozenset()) -> None:
        self.params = params
        self.eog_ids = eog_ids
        self.name = params.drafter
        self.ngram = ngram
        self.model = model
        self.controllers: dict[str, Controller] = {}
        self.cost = cost
        # What drafting really saved, per source: a losing one goes quiet (never slower).
        self.ledgers = {"ngram": PayoffLedger(cost)}
        self.model_can_pay = False
        if model is not None:
            model_cost = cost.with_draft_cost(draft_cost_s, draft_pass_s)
            self.ledgers["model"] = PayoffLedger(model_cost)
            self.controllers["model"] = Controller(model_cost, AcceptanceTracker(prior=0.6))
            # Even a very good draft model (right 90% of the time) cannot pay when drafting a
            # token, and taking in the target's correction on every pass, cost too much next to
            # verifying (a 0.5B draft for a 1.5B target on a 2-core CPU: 28 ms a draft token, 68
            # ms a target step; `model` mode measured 0.50-0.89x plain on every prompt of
            # docs/benchmarks/speculative.md): auto then never spends time syncing it.
            self.model_can_pay = best_draft_length(model_cost, GOOD_DRAFT_ALPHA, params.draft_max) > 0
            if not self.model_can_pay and params.drafter == "auto":
                log.info("the draft model cannot pay on this machine (%.0f ms per draft token); "
                         "auto leaves it unused", draft_cost_s * 1000)

    def plan(self, history: Sequence[int], room: int, sampler: Sampler) -> Draft:
        k_max = min(self.params.draft_max, room)
        if k_max < self.params.draft_min:
            return Draft()
        if self.ngram is not None:
            draft = _end_at_eog(self.ngram.propose(history, k_max), self.eog_ids)
            if len(draft.tokens) >= self.params.draft_min:
                k = (best_length_by_survival(self.cost, draft.survival)
                     if self.params.adaptive else len(draft.tokens))
                if k >= self.params.draft_min and self._allowed("ngram"):
                    return Draft(draft.tokens[:k], "ngram", draft.seconds, draft.match_len)
        if self.model is not None and (self.model_can_pay or self.params.drafter == "model"):
            k = self._choose("model", k_max)
            if k >= self.params.draft_min and self._allowed("model"):
                draft = self.model.propose(history, k, sampler)
                if len(draft.tokens) >= self.params.draft_min:
                    return draft
        return Draft()

    def begin(self, prompt: Sequence[int]) -> None:
        for ledger in self.ledgers.values():
            ledger.reset()
        if self.ngram is not None:
            self.ngram.begin(prompt)

    def observe(self, draft: Draft, n_accepted: int, verify_s: float) -> None:
        if draft.source in self.controllers:
            self.controllers[draft.source].update(len(draft.tokens), n_accepted)
        if self.params.adaptive and draft.source in self.ledgers:
            self.ledgers[draft.source].record(len(draft.tokens), n_accepted,
                                              draft.seconds + verify_s)

    def _allowed(self, source: str) -> bool:
        """Asked for explicitly (not adaptive): always; else unless the source is in a quiet
        spell for losing time (engine.speculative.payoff)."""
        return not self.params.adaptive or self.ledgers[source].allows()

    def reset(self) -> None:
        if self.ngram is not None:
            self.ngram.reset()

    def _choose(self, name: str, k_max: int) -> int:
        if not self.params.adaptive or (name == "model" and not self.model_can_pay):
            return k_max  # asked for explicitly: draft up to draft_max (p_min stops it early)
        return self.controllers[name].choose(k_max)


def _end_at_eog(draft: Draft, eog_ids: frozenset[int]) -> Draft:
    """A reply ends at its first end-of-generation token, so nothing after it is worth verifying
    (a copy of the user's message would otherwise run on into the chat markup)."""
    for i, tok in enumerate(draft.tokens):
        if tok in eog_ids:
            return replace(draft, tokens=draft.tokens[:i + 1], survival=draft.survival[:i + 1])
    return draft


# -- building one for a runtime -----------------------------------------------------------

class Speculation(Speculator):
    """A Speculator with what it owns: the draft model and its context (when one is used), and
    why a configured draft model was refused. The runtime holds one and closes it."""

    draft_model: Model | None = None
    draft_ctx: Context | None = None
    draft_problem: str | None = None
    cost_check: calibration.CostCheck | None = None

    def observe(self, draft: Draft, n_accepted: int, verify_s: float) -> None:
        super().observe(draft, n_accepted, verify_s)
        if self.cost_check is not None:
            self.cost_check.observe(len(draft.tokens) + 1, verify_s)

    def close(self) -> None:
        for obj in (self.draft_ctx, self.draft_model):
            if obj is not None:
                obj.close()
        self.draft_ctx = self.draft_model = None


def build_speculation(target: Model, ctx: Context, draft_spec: ModelSpec | None,
                      params: SpeculativeParams, draft_context: ContextParams | None = None,
                      on_calibrate: Callable[[], None] | None = None) -> Speculation:
    """Load the draft model if configured (refusing an incompatible one), calibrate, assemble.
    ``on_calibrate`` is called before a verify-cost curve is measured (not when it is cached)."""
    from engine.speculative.compat import check_pair

    draft_model = draft_ctx = model_drafter = problem = None
    draft_cost = draft_pass = 0.0
    if draft_spec is not None and params.drafter in ("model", "auto"):
        draft_model = Model(draft_spec)
        problem = check_pair(target, draft_model)
        if problem is not None:
            problem = f"the draft model cannot be used with this target: {problem}"
            log.warning("%s; using the n-gram drafter", problem)
            draft_model.close()
            draft_model = None
        else:
            try:
                draft_ctx = Context(draft_model, draft_context or replace(ctx.params, n_ctx=ctx.n_ctx))
                model_drafter = ModelDrafter(draft_ctx, params.p_min)
                draft_curve = calibration.cached_cost(draft_ctx, (1, 2), on_calibrate)
                # per draft token: one step; per pass: the correction and the last accepted
                # draft token, taken in as one batch of two
                draft_cost, draft_pass = draft_curve.verify_cost(1), draft_curve.verify_cost(2)
            except BaseException:
                if draft_ctx is not None:
                    draft_ctx.close()
                draft_model.close()
                raise
    use_ngram = params.drafter in ("ngram", "auto") or (params.drafter == "model" and model_drafter is None)
    ngram = NgramDrafter(NgramParams(params.ngram_min, params.ngram_max), vocab=target) if use_ngram else None
    try:
        cost = calibration.cached_cost(ctx, on_measure=on_calibrate)
    except BaseException:
        for obj in (draft_ctx, draft_model):
            if obj is not None:
                obj.close()
        raise
    spec = Speculation(params, cost, ngram=ngram, model=model_drafter, draft_cost_s=draft_cost,
                       draft_pass_s=draft_pass, eog_ids=target.eog_ids)
    spec.draft_model, spec.draft_ctx, spec.draft_problem = draft_model, draft_ctx, problem

    def mismatch(ratio: float) -> None:
        log.warning("verification passes cost %.1fx what the calibration measured (taken while "
                    "the machine was busy?): it is measured again at the next load", ratio)
        calibration.forget(ctx)

    spec.cost_check = calibration.CostCheck(cost, mismatch)
    return spec
