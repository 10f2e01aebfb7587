"""Choosing, for each target pass, which drafter drafts and how many tokens (zero included).

Each drafter has a controller: a measured verify-cost curve of the target (calibrated once per
model, machine and settings, then cached) plus an online acceptance estimate. ``auto`` asks the
n-gram drafter first (free to draft, strong when the reply copies its context), then the draft
model, and decodes plainly when neither is expected to pay.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from engine import paths
from engine.context import Context
from engine.sampling import Sampler
from engine.spec.controller import (AcceptanceTracker, Controller, CostModel, best_draft_length,
                                     calibrate)
from engine.spec.draft import Draft
from engine.spec.draft_model import ModelDrafter
from engine.spec.ngram import NgramDrafter, NgramParams
from engine.spec.params import SpeculativeParams

if TYPE_CHECKING:
    from engine.runtime import Runtime

log = logging.getLogger(__name__)

CALIBRATION_SIZES = (1, 2, 4, 8, 16, 32)
GOOD_DRAFT_ALPHA = 0.9


class NgramPolicy:
    """How many of an n-gram proposal's tokens to verify, from its ``match_len`` and the cost curve.

    A reply that has been copying its context for ``LONG_MATCH`` tokens usually keeps copying:
    it gets the most cost-efficient batch (the k that maximizes (k+1)/cost(k+1): ~32 on a 2-core
    CPU where big batches are cheap per token, ``draft_max`` on a GPU where every batch costs
    one step) once long drafts have been paying; until then a medium batch (about ``MID_COST``
    steps). A
    younger match (``SHORT_MATCH``..``LONG_MATCH``) gets a short probe (about ``SHORT_COST``
    steps). Each tier keeps an average of the time it saved per
    pass (accepted tokens times one step, minus the verify cost over one step); a tier whose
    average turns negative is switched off and retried after ``RETRY_AFTER`` proposals (doubling,
    up to 4x, while retries keep failing), so text that does not copy (open chat) is decoded
    plainly, never noticeably slower.
    """

    LONG_MATCH = 6
    SHORT_MATCH = 4
    SHORT_COST = 2.5
    MID_COST = 5.0
    RETRY_AFTER = 24
    EMA = 0.2

    def __init__(self, cost: CostModel, draft_max: int) -> None:
        self.cost = cost
        step = cost.verify_cost(1)
        self.long_k = max(range(1, draft_max + 1), key=lambda k: ((k + 1) / cost.verify_cost(k + 1), k))
        self.short_k = self._k_within(self.SHORT_COST * step, draft_max)
        self.mid_k = min(self.long_k, self._k_within(self.MID_COST * step, draft_max))
        self.saved = {"long": 0.0, "short": 0.0}
        self.off_for = {"long": 0, "short": 0}
        self.backoff = {"long": self.RETRY_AFTER, "short": self.RETRY_AFTER}
        self._tier: str | None = None

    def choose(self, match_len: int, available: int) -> int:
        tier = ("long" if match_len >= self.LONG_MATCH else
                "short" if match_len >= self.SHORT_MATCH else None)
        self._tier = None
        if tier is None:
            return 0
        if self.off_for[tier] > 0:
            self.off_for[tier] -= 1
            if self.off_for[tier] > 0:
                return 0
            self.saved[tier] = 0.0  # retry with a clean slate
        self._tier = tier
        if tier == "short":
            return min(available, self.short_k)
        return min(available, self.long_k if self.saved["long"] > 0 else self.mid_k)

    def _k_within(self, budget: float, draft_max: int) -> int:
        return max([k for k in range(1, draft_max + 1) if self.cost.verify_cost(k + 1) <= budget] or [1])

    def update(self, n_proposed: int, n_accepted: int) -> None:
        tier, self._tier = self._tier, None
        if tier is None or n_proposed == 0:
            return
        step = self.cost.verify_cost(1)
        saved = (n_accepted + 1) * step - self.cost.verify_cost(n_proposed + 1)
        self.saved[tier] += self.EMA * (saved / step - self.saved[tier])
        if self.saved[tier] < 0:
            self.off_for[tier] = self.backoff[tier]
            self.backoff[tier] = min(4 * self.RETRY_AFTER, 2 * self.backoff[tier])
        elif saved > 0:
            self.backoff[tier] = self.RETRY_AFTER


class Speculator:
    """Implements the generator's ``Speculation`` protocol over one or two drafters."""

    def __init__(self, params: SpeculativeParams, cost: CostModel, *,
                 ngram: NgramDrafter | None = None, model: ModelDrafter | None = None,
                 draft_cost_s: float = 0.0, eog_ids: frozenset[int] = frozenset()) -> None:
        self.params = params
        self.eog_ids = eog_ids
        self.name = params.drafter
        self.ngram = ngram
        self.model = model
        self.controllers: dict[str, Controller] = {}
        self.ngram_policy = NgramPolicy(cost, params.draft_max) if ngram is not None else None
        self.model_can_pay = False
        if model is not None:
            model_cost = cost.with_draft_cost(draft_cost_s)
            self.controllers["model"] = Controller(model_cost, AcceptanceTracker(prior=0.6))
            # Even a very good draft model (right 90% of the time) cannot pay when drafting a
            # token costs too much next to verifying it (a 0.5B draft for a 1.5B target on a
            # 2-core CPU): auto then never spends time syncing it.
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
                k = (self.ngram_policy.choose(draft.match_len, len(draft.tokens))
                     if self.params.adaptive else len(draft.tokens))
                if k >= self.params.draft_min:
                    return Draft(draft.tokens[:k], None, "ngram", draft.seconds, draft.match_len)
        if self.model is not None and (self.model_can_pay or self.params.drafter == "model"):
            k = self._choose("model", k_max, None)
            if k >= self.params.draft_min:
                draft = self.model.propose(history, k, sampler)
                if len(draft.tokens) >= self.params.draft_min:
                    return draft
        return Draft()

    def observe(self, draft: Draft, n_accepted: int, verify_s: float) -> None:
        if draft.source == "ngram" and self.ngram_policy is not None:
            self.ngram_policy.update(len(draft.tokens), n_accepted)
        elif draft.source in self.controllers:
            self.controllers[draft.source].update(len(draft.tokens), n_accepted)

    def reset(self) -> None:
        if self.ngram is not None:
            self.ngram.reset()

    def _choose(self, name: str, k_max: int, available: int | None) -> int:
        if not self.params.adaptive or (name == "model" and not self.model_can_pay):
            return k_max  # asked for explicitly: draft up to draft_max (p_min stops it early)
        return self.controllers[name].choose(k_max, available)


def _end_at_eog(draft: Draft, eog_ids: frozenset[int]) -> Draft:
    """A reply ends at its first end-of-generation token, so nothing after it is worth verifying
    (a copy of the user's message would otherwise run on into the chat markup)."""
    for i, tok in enumerate(draft.tokens):
        if tok in eog_ids:
            return Draft(draft.tokens[:i + 1], draft.probs, draft.source, draft.seconds, draft.match_len)
    return draft


# -- building one for a runtime -----------------------------------------------------------

def build_speculation(rt: Runtime, params: SpeculativeParams) -> Speculator:
    """Load the draft model if configured (refusing an incompatible one), calibrate, assemble."""
    from engine.context import ContextParams
    from engine.model import Model
    from engine.spec.compat import check_pair

    cfg = rt.config
    model_drafter = None
    draft_cost = 0.0
    if cfg.draft is not None and params.drafter in ("model", "auto"):
        draft = Model(cfg.draft)
        rt._closables.append(draft)
        problem = check_pair(rt.target, draft)
        if problem is not None:
            rt.draft_problem = f"the draft model cannot be used with this target: {problem}"
            log.warning("%s; using the n-gram drafter", rt.draft_problem)
            draft.close()
        else:
            dctx = Context(draft, cfg.draft_context or ContextParams(
                n_ctx=rt.ctx.n_ctx, n_batch=cfg.context.n_batch, n_threads=cfg.context.n_threads,
                type_k=cfg.context.type_k, type_v=cfg.context.type_v))
            rt._closables.insert(0, dctx)
            rt.draft_model, rt.draft_ctx = draft, dctx
            model_drafter = ModelDrafter(dctx, params.p_min)
            draft_cost = cached_cost(dctx, sizes=(1,)).verify_cost(1)
    use_ngram = params.drafter in ("ngram", "auto") or (params.drafter == "model" and model_drafter is None)
    ngram = NgramDrafter(NgramParams(params.ngram_min, params.ngram_max)) if use_ngram else None
    cost = cached_cost(rt.ctx)
    return Speculator(params, cost, ngram=ngram, model=model_drafter, draft_cost_s=draft_cost,
                      eog_ids=rt.target.eog_ids)


def _cache_file() -> Path:
    return paths.cache_dir() / "verify-cost.json"


def _cache_key(ctx: Context, sizes: Sequence[int]) -> str:
    st = ctx.model.path.stat()
    return json.dumps([str(ctx.model.path), st.st_size, st.st_mtime_ns, ctx.params.threads(),
                       ctx.model.spec.n_gpu_layers, ctx.params.type_k, list(sizes), os.cpu_count()])


def cached_cost(ctx: Context, sizes: Sequence[int] = CALIBRATION_SIZES) -> CostModel:
    """The verify-cost curve of ``ctx``'s model on this machine (measured once, then cached)."""
    key = _cache_key(ctx, sizes)
    try:
        entries = json.loads(_cache_file().read_text())
        if isinstance(entries, dict) and isinstance(entries.get(key), str):
            return CostModel.from_json(entries[key])
    except (OSError, ValueError):
        entries = {}
    cost = measure_cost(ctx, sizes)
    try:
        entries = entries if isinstance(entries, dict) else {}
        entries[key] = cost.to_json()
        _cache_file().parent.mkdir(parents=True, exist_ok=True)
        tmp = _cache_file().with_suffix(".tmp")
        tmp.write_text(json.dumps(entries))
        os.replace(tmp, _cache_file())
    except OSError as e:
        log.warning("could not cache the verify cost: %s", e)
    return cost


def measure_cost(ctx: Context, sizes: Sequence[int] = CALIBRATION_SIZES, repeats: int = 3) -> CostModel:
    """Time target decodes of n tokens (all logits, as in verification) on an empty context."""
    saved = list(ctx.tokens)
    ctx.clear()
    filler = [ctx.model.bos if ctx.model.bos >= 0 else 1] + [100 + i for i in range(max(sizes) + 63)]
    ctx.decode(filler[:64])  # warm-up, and a little context to attend to

    def measure(n: int) -> float:
        t = time.perf_counter()
        ctx.decode(filler[64:64 + n], logits="all")
        ctx.logits_rows()
        dt = time.perf_counter() - t
        ctx.rewind(64)
        return dt

    try:
        return calibrate(measure, sizes, repeats)
    finally:
        ctx.clear()
        if saved:
            log.debug("calibration cleared a cached prompt of %d tokens", len(saved))
