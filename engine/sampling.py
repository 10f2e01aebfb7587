"""Sampling from logits: greedy at temperature 0, else llama.cpp's chain in numpy.

Order as in llama.cpp's default chain: repetition penalty → top-k → top-p → min-p → temperature.
``distribution`` returns the sparse final distribution, which speculative sampling also needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int | None = None
    max_tokens: int = 1024
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p", "repeat_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise ValueError(f"{name.replace('_', '-')} must be a finite number, "
                                 f"not {value!r}")
        for name in ("top_k", "repeat_last_n", "max_tokens"):
            if type(getattr(self, name)) is not int:
                raise ValueError(f"{name.replace('_', '-')} must be an integer")
        if self.seed is not None and type(self.seed) is not int:
            raise ValueError("seed must be an integer")
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1 or not 0 <= self.min_p < 1:
            raise ValueError("sampling parameters out of range (temperature >= 0, top-k >= 0, "
                             "0 < top-p <= 1, 0 <= min-p < 1)")
        if self.repeat_penalty <= 0 or self.max_tokens < 1 or self.repeat_last_n < 0:
            raise ValueError("repeat-penalty must be > 0, repeat-last-n >= 0 and max-tokens >= 1")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def window(self, tokens: Sequence[int]) -> Sequence[int]:
        """The recent tokens the repetition penalty looks at (none when repeat_last_n is 0)."""
        return tokens[-self.repeat_last_n:] if self.repeat_last_n > 0 else ()


def penalized(logits: np.ndarray, recent: Sequence[int], penalty: float) -> np.ndarray:
    """llama.cpp's repetition penalty: a copy where each recent token's logit is divided by
    ``penalty`` if positive, multiplied if negative. Returns ``logits`` itself when penalty == 1."""
    if penalty == 1.0 or not recent:
        return logits
    out = np.array(logits, dtype=np.float32, copy=True)
    ids = np.unique(np.asarray(recent, dtype=np.int64))
    vals = out[ids]
    out[ids] = np.where(vals > 0, vals / penalty, vals * penalty)
    return out


def distribution(logits: np.ndarray, params: SamplingParams,
                 recent: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, probabilities) of the final sampling distribution, probabilities descending."""
    scores = penalized(logits, params.window(recent), params.repeat_penalty)
    n = scores.shape[0]
    if 0 < params.top_k < n:
        ids = np.argpartition(scores, n - params.top_k)[n - params.top_k:]
    else:
        ids = np.arange(n)
    vals = scores[ids].astype(np.float64)
    order = np.argsort(-vals, kind="stable")
    ids, vals = ids[order], vals[order]
    probs = np.exp(vals - vals[0])
    probs /= probs.sum()
    keep = len(ids)
    if params.top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1)
    if params.min_p > 0:
        keep = min(keep, max(1, int(np.count_nonzero(probs >= params.min_p * probs[0]))))
    ids, vals = ids[:keep], vals[:keep]
    temp = max(params.temperature, 1e-6)
    probs = np.exp((vals - vals[0]) / temp)
    probs /= probs.sum()
    return ids, probs


def dense(ids: np.ndarray, probs: np.ndarray, n_vocab: int) -> np.ndarray:
    out = np.zeros(n_vocab, dtype=np.float64)
    out[ids] = probs
    return out


class Sampler:
    """Picks tokens for one generation; seeded runs are reproducible."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        # any integer seeds it: folded into numpy's range (non-negative, below 2**64)
        self.rng = np.random.default_rng(None if params.seed is None else params.seed % 2**64)

    def sample(self, logits: np.ndarray, recent: Sequence[int] = ()) -> int:
        p = self.params
        if p.greedy:
            return int(np.argmax(penalized(logits, p.window(recent), p.repeat_penalty)))
        ids, probs = distribution(logits, p, recent)
        return int(ids[min(int(np.searchsorted(np.cumsum(probs), self.rng.random())), len(ids) - 1)])

    def probs(self, logits: np.ndarray, recent: Sequence[int] = ()) -> np.ndarray:
        """The dense distribution (n_vocab,) that ``sample`` draws from (sampling mode)."""
        ids, probs = distribution(logits, self.params, recent)
        return dense(ids, probs, logits.shape[0])
