"""Sampling from logits: greedy at temperature 0, else llama.cpp's chain in numpy.

Order as in llama.cpp's default chain: repetition penalty → top-k → top-p → min-p → temperature.
``distribution`` returns the sparse final distribution, which speculative sampling also needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.params import Params, param


def _seed(value: int) -> int:
    """Any integer a client sends is a seed; a negative one means "random" (llama.cpp's -1)."""
    return -1 if value < 0 else value % 2**64


@dataclass(frozen=True)
class SamplingParams(Params):
    """How the next token is picked. Every field is a row of the parameter table
    (engine.params): its range, help and names in each API are declared here, once."""

    temperature: float = param(
        0.7, "Temperature", "0 picks the most likely token (greedy); higher is more varied.",
        minimum=0, maximum=2, api=("temperature",))
    top_k: int = param(
        40, "Top-k", "Keep this many most likely tokens (0: all).", minimum=0, maximum=100_000,
        api=("top_k",), step=1)
    top_p: float = param(
        0.95, "Top-p", "Keep the smallest set of most likely tokens with this much probability "
        "(0 keeps one).", minimum=0, maximum=1, api=("top_p",))
    min_p: float = param(
        0.05, "Min-p", "Drop tokens less likely than this times the most likely one.",
        minimum=0, maximum=1, api={"openai": ("min_p",), "ollama": ("min_p",)}, step=0.01)
    repeat_penalty: float = param(
        1.0, "Repeat penalty", "Make tokens seen in the last window less likely (1: off).",
        minimum=0, exclusive_minimum=True, maximum=10,
        api={"openai": ("repeat_penalty",), "ollama": ("repeat_penalty",)})
    repeat_last_n: int = param(
        64, "Penalty window", "How many recent tokens the penalties look at (0: none).",
        minimum=0, maximum=65_536,
        api={"openai": ("repeat_last_n",), "ollama": ("repeat_last_n",)}, step=1)
    seed: int = param(
        -1, "Seed", "The same seed gives the same sampled reply (-1: a new seed every reply).",
        minimum=-1, maximum=2**64 - 1, api=("seed",), coerce=_seed, step=1)
    max_tokens: int = param(
        1024, "Max reply tokens", "Longest reply, in tokens.", minimum=1, maximum=1 << 20,
        api={"openai": ("max_completion_tokens", "max_tokens"), "ollama": ("num_predict",),
             "anthropic": ("max_tokens",)}, step=1)
    stop: tuple[str, ...] = param(
        (), "Stop strings", "The reply ends before the first of these strings.", max_items=16,
        api={"openai": ("stop",), "ollama": ("stop",), "anthropic": ("stop_sequences",)},
        cli="--stop")

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
        self.rng = np.random.default_rng(None if params.seed < 0 else params.seed)

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
