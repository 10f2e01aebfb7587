"""The draft-model drafter: a second llama context on a small model.

Delta sync: before drafting, the draft context is brought to the target's accepted history by
rewinding to the longest common prefix and decoding only the tokens past it (normally the
correction token, plus the last accepted draft token); the conversation is never re-prefilled.
When the target dropped the oldest turns (a long chat), the draft cache drops them too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from engine.cache.prefix import align, common_prefix
from engine.decode.sampling import Sampler, distribution
from engine.decode.speculative.controller import CostModel
from engine.decode.speculative.draft import Draft
from engine.llama.context import LlamaSequence

# A draft model's verify-cost curve: one step per draft token, per pass a batch of two (the
# correction taken in with the last accepted draft token), and a batch of 64 for what reading a
# prompt it has not seen costs a token.
CURVE_SIZES = (1, 2, 64)


def draft_costs(curve: CostModel) -> tuple[float, float, float]:
    """Seconds of a draft token, of a pass's intake, and of a prompt token read, from the draft
    model's curve over ``CURVE_SIZES``."""
    return curve.verify_cost(1), curve.verify_cost(2), curve.verify_cost(64) / 64


class ModelDrafter:
    name = "model"

    def __init__(self, ctx: LlamaSequence, p_min: float = 0.75) -> None:
        self.ctx = ctx
        self.p_min = p_min

    def sync(self, history: Sequence[int]) -> None:
        """Make the draft context hold ``history`` (so its last logits predict what follows)."""
        ctx = self.ctx
        keep, _, _ = align(ctx, history)  # drops what the target dropped, shifting the rest
        ctx.decode(history[keep:])

    def behind(self, history: Sequence[int]) -> int:
        """How many tokens of ``history`` the draft context would read before it drafts."""
        return len(history) - common_prefix(self.ctx.tokens, history)

    def propose(self, history: Sequence[int], max_n: int, sampler: Sampler) -> Draft:
        """Up to ``max_n`` tokens, each the draft model's own pick by the target's sampling rule
        (the same seed and positions: when the two models agree on a token's distribution, the
        draws agree too); stops early when the draft is less sure than ``p_min``."""
        t0 = time.perf_counter()
        if len(history) + max_n > self.ctx.n_ctx:
            max_n = self.ctx.n_ctx - len(history)
        if max_n < 1:
            return Draft((), source=self.name)
        self.sync(history)
        tokens: list[int] = []
        while True:
            logits = self.ctx.logits()
            context = [*history, *tokens]
            if _confidence(logits, sampler, context) < self.p_min:
                break
            tokens.append(sampler.pick(logits, context, constrained=False))
            if len(tokens) >= max_n:
                break
            self.ctx.decode([tokens[-1]])
        return Draft(tuple(tokens), self.name, time.perf_counter() - t0)

    def reset(self) -> None:
        self.ctx.clear()


def _confidence(logits: np.ndarray, sampler: Sampler, context: Sequence[int]) -> float:
    """How likely the draft's pick is: its softmax probability (greedy), or the top probability
    of the sampling distribution."""
    if sampler.params.greedy:
        return float(1.0 / np.exp(logits - logits.max()).sum())
    return float(distribution(logits, sampler.params, context)[1].max())
