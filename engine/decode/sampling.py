"""Picking the next token from logits: greedy at temperature 0, else llama.cpp's chain in numpy
and a Gumbel-max draw.

Order as in llama.cpp's default chain: penalties → top-k → top-p → min-p → temperature. A
grammar (``Constraint``) masks the tokens it does not allow before the chain.

A sampled token is ``argmax(log p(t) + g(seed, position, t))`` over the chain's candidates, where
``g`` is standard Gumbel noise made from a hash of its three arguments (splitmix64). The argmax of
log-probabilities plus independent Gumbel noise is distributed as ``p`` (the Gumbel-max trick),
so every token is a sample of the target's distribution. Because the noise depends only on the
seed and where the token is, a draft token is accepted exactly when it is the token plain
sampling draws at that position: a seeded reply is the same with and without speculation (up to
near-ties in batch numerics, as for greedy), and continues deterministically from its seed
alone. An unseeded reply draws a fresh 64-bit seed.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engine.events import Logprob
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
    presence_penalty: float = param(
        0.0, "Presence penalty", "Lower the logit of every token seen in the window by this "
        "(negative: raise it).", minimum=-2, maximum=2, api=("presence_penalty",))
    frequency_penalty: float = param(
        0.0, "Frequency penalty", "Lower the logit of each token seen in the window by this "
        "times its count.", minimum=-2, maximum=2, api=("frequency_penalty",))
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
             "anthropic": ("max_tokens",), "responses": ("max_output_tokens",)}, step=1)
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


class Constraint(Protocol):
    """A grammar the reply must follow (engine.decode.constraint): which tokens it allows next."""

    def allows(self, token: int) -> bool: ...

    def mask(self) -> np.ndarray: ...  # bool (n_vocab,): the tokens allowed next


F32_MAX = float(np.finfo(np.float32).max)


def penalties(logits: np.ndarray, params: SamplingParams, history: Sequence[int]) -> np.ndarray:
    """llama.cpp's penalties over the last ``repeat_last_n`` tokens of ``history``: each seen
    token's logit is divided by ``repeat_penalty`` if positive (multiplied if negative), then
    lowered by ``count * frequency_penalty + presence_penalty``. A copy; ``logits`` itself when
    no penalty applies."""
    recent = params.window(history)
    if not len(recent) or (params.repeat_penalty == 1.0 and params.presence_penalty == 0.0
                           and params.frequency_penalty == 0.0):
        return logits
    ids, counts = np.unique(np.asarray(recent, dtype=np.int64), return_counts=True)
    text = ids < logits.shape[0]  # an image's positions are no token (engine.llama.media)
    ids, counts = ids[text], counts[text]
    out = np.array(logits, dtype=np.float32, copy=True)
    vals = out[ids].astype(np.float64)  # a tiny penalty would overflow float32 to inf
    with np.errstate(over="ignore"):  # ... and a tinier one float64 too: clipped below
        vals = np.where(vals > 0, vals / params.repeat_penalty, vals * params.repeat_penalty)
        vals -= counts * params.frequency_penalty + params.presence_penalty
    out[ids] = np.clip(vals, -F32_MAX, F32_MAX)
    return out


def _truncate(scores: np.ndarray, params: SamplingParams,
              top: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, scores) the chain keeps after top-k, top-p and min-p, scores descending; a
    chain that cuts nothing keeps every token in id order (sorting the whole vocabulary costs
    about 10 ms a token, and the pick and the probabilities need no order). ``top``: the top-k's
    ids, when already found."""
    n = scores.shape[0]
    if top is None and not 0 < params.top_k < n:
        if params.top_p >= 1.0 and params.min_p <= 0:
            return np.arange(n), scores.astype(np.float64)
        return _nucleus(scores, params)
    ids = top if top is not None else np.argpartition(scores, n - params.top_k)[n - params.top_k:]
    ids, vals = _descending(scores, ids)
    keep = len(ids)
    if params.top_p < 1.0 or params.min_p > 0:
        probs = np.exp(vals - vals[0])
        probs /= probs.sum()
        if params.top_p < 1.0:
            keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1)
        if params.min_p > 0:
            keep = min(keep, max(1, int(np.count_nonzero(probs >= params.min_p * probs[0]))))
    return ids[:keep], vals[:keep]


def _descending(scores: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    vals = scores[ids].astype(np.float64)
    order = np.argsort(-vals, kind="stable")
    return ids[order], vals[order]


def _nucleus(scores: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """Top-p and min-p over the whole vocabulary (no top-k): the prefix of the tokens by score
    they keep, looked for among the best 64, then 1,024, then all, until one of the two cuts
    falls inside (each keeps a prefix; the chain keeps the shorter). Sorting all 151,936
    scores for it cost about 14 ms a token on the 2-core CPU."""
    n = scores.shape[0]
    peak = scores.max()
    shifted = scores - peak
    np.exp(shifted, out=shifted)
    total = float(shifted.sum(dtype=np.float64))  # the softmax's sum, in float32 terms summed in float64
    for m in (64, 1024, n):
        m = min(m, n)
        ids, vals = _descending(scores, np.argpartition(scores, n - m)[n - m:] if m < n else np.arange(n))
        probs = np.exp(vals - vals[0]) / total
        cuts = []
        if params.top_p < 1.0:
            mass = np.cumsum(probs)
            if mass[-1] >= params.top_p or m == n:
                cuts.append(int(np.searchsorted(mass, params.top_p)) + 1)
        if params.min_p > 0:
            above = int(np.count_nonzero(probs >= params.min_p * probs[0]))
            if above < m or m == n:
                cuts.append(max(1, above))
        if cuts:
            keep = min(min(cuts), m)
            return ids[:keep], vals[:keep]
    raise AssertionError("unreachable: every cut falls inside the whole vocabulary")


def distribution(logits: np.ndarray, params: SamplingParams,
                 recent: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, probabilities) of the final sampling distribution, in ``_truncate``'s order."""
    ids, vals = _truncate(penalties(logits, params, recent), params)
    probs = np.exp((vals - vals.max()) / max(params.temperature, 1e-6))
    return ids, probs / probs.sum()


def logprob(logits: np.ndarray, token: int, top_n: int = 0) -> Logprob:
    """``token``'s log-probability under the softmax of ``logits`` (no penalty, chain or
    grammar), with the ``top_n`` most likely tokens."""
    # in the row's float32, summed in float64: the same to about 1e-6, and no vocabulary-sized
    # float64 temporaries (1.0 ms a token against 0.1 ms on the 2-core CPU)
    row = np.asarray(logits, dtype=np.float32)
    peak = row.max()
    scaled = row - peak
    np.exp(scaled, out=scaled)
    lse = float(peak) + math.log(float(scaled.sum(dtype=np.float64)))
    top: tuple[tuple[int, float], ...] = ()
    if top_n > 0:
        n = min(top_n, row.shape[0])
        best = np.argpartition(row, row.shape[0] - n)[row.shape[0] - n:]
        best = best[np.argsort(-row[best], kind="stable")]
        top = tuple((int(t), float(row[t]) - lse) for t in best)
    return Logprob(float(row[token]) - lse, top)


# -- Gumbel noise from (seed, position, token) ---------------------------------------------
_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(x: int) -> int:
    """splitmix64's finalizer on a Python int (64-bit)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def _mix_array(x: np.ndarray) -> np.ndarray:
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def gumbel(seed: int, position: int, ids: np.ndarray) -> np.ndarray:
    """Standard Gumbel noise for tokens ``ids`` at ``position`` under ``seed``: the same
    arguments always give the same values, distinct ones independent-looking values."""
    key = _mix((seed ^ _mix((position + 1) * _GOLDEN & _MASK)) & _MASK)
    with np.errstate(over="ignore"):
        x = _mix_array(np.uint64(key) + ids.astype(np.uint64) * np.uint64(_GOLDEN))
    # 53 bits, through int64 (numpy converts uint64 to float64 several times slower)
    u = ((x >> np.uint64(11)).view(np.int64).astype(np.float64) + 0.5) * 2.0 ** -53  # in (0, 1)
    return -np.log(-np.log(u))


class Sampler:
    """Picks the tokens of one reply (``pick``), under ``constraint`` when one is given."""

    def __init__(self, params: SamplingParams, constraint: Constraint | None = None) -> None:
        self.params = params
        self.constraint = constraint
        self.seed = params.seed if params.seed >= 0 else secrets.randbits(64)

    def pick(self, logits: np.ndarray, history: Sequence[int], *, constrained: bool = True) -> int:
        """The token after ``history`` (its length is the position drawn at). ``constrained``
        False ignores the grammar (a draft model's guesses are checked when verified)."""
        p = self.params
        scores = penalties(logits, p, history)
        c = self.constraint if constrained else None
        if c is None:
            return int(np.argmax(scores)) if p.greedy else self._draw(scores, len(history))
        if p.greedy:
            best = int(np.argmax(scores))
            if c.allows(best):  # the argmax over all tokens is the argmax over the allowed
                return best
        mask = c.mask()
        if not p.greedy:
            top = _allowed_top_k(scores, mask, p.top_k)
            if top is not None:
                return self._draw(scores, len(history), top)
        # the allowed tokens' scores alone: cheaper to cut than the whole row with the rest set
        # to -inf (partitioning around that many equal values is about 3x slower)
        allowed = np.flatnonzero(mask)
        if not len(allowed):  # nothing allowed: the grammar has failed, as its matcher says next
            allowed = np.arange(len(scores))
        if p.greedy:
            return int(allowed[np.argmax(scores[allowed])])
        return int(allowed[self._draw(scores[allowed], len(history), ids=allowed)])

    def _draw(self, scores: np.ndarray, position: int, top: np.ndarray | None = None,
              ids: np.ndarray | None = None) -> int:
        """The index into ``scores`` of the Gumbel-max draw among what the chain keeps (``top``:
        the top-k already found; ``ids``: the token ids of ``scores``, when a subset)."""
        kept, vals = _truncate(scores, self.params, top)
        tokens = kept if ids is None else ids[kept]
        noisy = (vals - vals.max()) / max(self.params.temperature, 1e-6) + gumbel(self.seed, position, tokens)
        return int(kept[int(np.argmax(noisy))])


def _allowed_top_k(scores: np.ndarray, mask: np.ndarray, k: int) -> np.ndarray | None:
    """The ids of the ``k`` best scores ``mask`` allows, found among the ``2k`` best of all
    (they are the first ``k`` allowed there, best first), or None when fewer than ``k`` of those
    are allowed, no top-k applies or the mask allows less than half the vocabulary. Where a
    grammar allows most tokens (inside a JSON string) this spares taking the allowed tokens'
    scores out of the whole row: 303 against 170 µs a token with 99% allowed, on the 2-core CPU
    (where most are refused the subset is cheaper: 45 µs with 1% allowed)."""
    n = scores.shape[0]
    if not 0 < 2 * k < n or 2 * int(np.count_nonzero(mask)) < n:  # less than half allowed:
        return None  # the 2k best would often hold fewer than k of them
    near = np.argpartition(scores, n - 2 * k)[n - 2 * k:]
    near = near[np.argsort(-scores[near], kind="stable")]
    near = near[mask[near]]
    return near[:k] if len(near) >= k else None
