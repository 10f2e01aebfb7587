"""The draft-model drafter: a second llama context on a small model.

Delta sync: before drafting, the draft context is brought to the target's accepted history by
rewinding to the longest common prefix and decoding only the tokens past it (normally the
correction token, plus the last accepted draft token); the conversation is never re-prefilled.
When the target dropped the oldest turns (a long chat), the draft cache drops them too.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from engine.context import Context
from engine.generate import align
from engine.sampling import Sampler, dense, distribution
from engine.speculative.draft import Draft


class ModelDrafter:
    name = "model"

    def __init__(self, ctx: Context, p_min: float = 0.75) -> None:
        self.ctx = ctx
        self.p_min = p_min

    def sync(self, history: Sequence[int]) -> None:
        """Make the draft context hold ``history`` (so its last logits predict what follows)."""
        ctx = self.ctx
        keep, _, _ = align(ctx, history)  # drops what the target dropped, shifting the rest
        ctx.decode(history[keep:])

    def propose(self, history: Sequence[int], max_n: int, sampler: Sampler) -> Draft:
        t0 = time.perf_counter()
        if len(history) + max_n > self.ctx.n_ctx:
            max_n = self.ctx.n_ctx - len(history)
        if max_n < 1:
            return Draft((), source=self.name)
        self.sync(history)
        tokens: list[int] = []
        probs: list[np.ndarray] = []
        params = sampler.params
        while True:
            logits = self.ctx.logits()
            if params.greedy:
                tok = int(np.argmax(logits))
                top = float(1.0 / np.exp(logits - logits[tok]).sum())
            else:
                ids, p = distribution(logits, params, list(history) + tokens)
                tok = int(ids[min(int(np.searchsorted(np.cumsum(p), sampler.rng.random())), len(ids) - 1)])
                top = float(p[0])
                probs.append(dense(ids, p, logits.shape[0]))
            if top < self.p_min:
                if probs:
                    probs.pop()
                break
            tokens.append(tok)
            if len(tokens) >= max_n:
                break
            self.ctx.decode([tok])
        return Draft(tuple(tokens), np.stack(probs) if probs else None, self.name,
                     time.perf_counter() - t0)

    def reset(self) -> None:
        self.ctx.clear()
