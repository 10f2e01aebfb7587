"""The accept step of speculative decoding: one pure function of (draft, target, draft probs, rng).

The target has scored ``[last, d1, ..., dk]`` in one batch. Row ``i`` of ``target`` (shape
``(k+1, V)``) is its distribution for the token after position ``i``: row 0 judges ``d1``,
row ``k`` is the distribution of the bonus token that follows a fully accepted draft.

Why each mode emits exactly what the target alone would have emitted:

* Greedy (``rng is None``): the target alone would emit ``argmax(row 0)``, then (given that
  token) ``argmax(row 1)``, ... A draft token is kept only while it *is* that argmax, so rows
  past the first mismatch are never used and the output is token-for-token plain greedy.
* Sampling with draft probabilities ``q`` (standard speculative sampling, Leviathan et al.
  2023 / Chen et al. 2023): ``d ~ q`` is kept with probability ``min(1, p(d)/q(d))``, else a
  token is drawn from ``norm(max(0, p - q))``. Then
  ``P(emit x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y))) * max(0, p(x)-q(x)) / Z``
  ``         = min(p(x), q(x)) + max(0, p(x) - q(x)) = p(x)``
  because ``Z = sum_y max(0, p(y)-q(y)) = 1 - sum_y min(p(y), q(y))``. Each emitted token is
  therefore distributed as ``p`` given the accepted prefix, and the next row is conditioned on
  that prefix, so the whole sequence has the target's distribution. (``Z == 0`` means p == q on
  the support, where rejection has probability 0; sampling from ``p`` there is only a guard
  against rounding.)
* Sampling without draft probabilities (n-gram drafts): draw ``y ~ p`` at each position and
  keep the draft token while ``y == d``; the first ``y != d`` is emitted as the correction.
  Every emitted token is literally a sample of ``p`` at its position, so this is plain sampling
  that merely gets several positions verified per pass. (It equals speculative sampling with a
  one-hot ``q``.)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Verdict", "verify"]

# Sampling rows must sum to 1 within this tolerance (float32 sums over ~150k entries drift ~1e-5).
_SUM_TOL = 1e-3


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verification pass.

    The caller emits ``draft[:n_accepted]`` followed by ``next_token``, i.e. ``n_accepted + 1``
    tokens, and rewinds its caches past the rejected drafts.
    """

    n_accepted: int  # how many draft tokens were accepted (0..k)
    next_token: int  # the target's correction (on rejection) or bonus token (after full acceptance)


def verify(
    draft: Sequence[int],
    target: np.ndarray,
    *,
    draft_probs: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
) -> Verdict:
    """Accept a prefix of ``draft`` against the target's rows and pick the next token.

    Greedy when ``rng`` is None (``target`` holds logits or any scores; ties go to the lowest
    token id, as ``np.argmax`` does). Sampling when ``rng`` is given (``target`` rows are
    probability distributions after all sampler transforms; ``draft_probs``, shape ``(k, V)``,
    are the distributions the drafts were sampled from, or None for drafts without
    probabilities). Raises ValueError on inconsistent shapes or invalid rows.
    """
    tokens = [int(t) for t in draft]
    k = len(tokens)
    target = np.asarray(target)
    if target.ndim != 2:
        raise ValueError(f"target must be 2-D (k+1, V), got shape {target.shape}")
    if target.shape[0] != k + 1:
        raise ValueError(f"target has {target.shape[0]} rows but a draft of {k} tokens needs {k + 1}")
    vocab = target.shape[1]
    if vocab < 1:
        raise ValueError("target has an empty vocabulary axis")
    for t in tokens:
        if not 0 <= t < vocab:
            raise ValueError(f"draft token {t} is outside the vocabulary [0, {vocab})")
    if draft_probs is not None:
        if rng is None:
            raise ValueError("draft_probs are only used when sampling; pass rng or drop draft_probs")
        draft_probs = np.asarray(draft_probs)
        if draft_probs.shape != (k, vocab):
            raise ValueError(f"draft_probs must have shape {(k, vocab)}, got {draft_probs.shape}")

    if rng is None:
        return _verify_greedy(tokens, target)
    if draft_probs is None:
        return _verify_sampled_exact(tokens, target, rng)
    return _verify_speculative(tokens, target, draft_probs, rng)


def _verify_greedy(tokens: list[int], target: np.ndarray) -> Verdict:
    best = np.argmax(target, axis=1)  # (k+1,)
    for i, tok in enumerate(tokens):
        if int(best[i]) != tok:
            return Verdict(n_accepted=i, next_token=int(best[i]))
    return Verdict(n_accepted=len(tokens), next_token=int(best[len(tokens)]))


def _verify_sampled_exact(tokens: list[int], target: np.ndarray, rng: np.random.Generator) -> Verdict:
    for i, tok in enumerate(tokens):
        y = _sample(_distribution(target[i], "target", i), rng)
        if y != tok:
            return Verdict(n_accepted=i, next_token=y)
    k = len(tokens)
    return Verdict(n_accepted=k, next_token=_sample(_distribution(target[k], "target", k), rng))


def _verify_speculative(
    tokens: list[int], target: np.ndarray, draft_probs: np.ndarray, rng: np.random.Generator
) -> Verdict:
    for i, tok in enumerate(tokens):
        p = _distribution(target[i], "target", i)
        q = _distribution(draft_probs[i], "draft_probs", i)
        # Accept with probability min(1, p/q): u*q < p with u in [0, 1). If q(d) == 0 the draft
        # was not really sampled from q (contract breach); the ratio is then infinite and the
        # token is kept whenever the target gives it any mass.
        if rng.random() * q[tok] < p[tok]:
            continue
        residual = np.maximum(p - q, 0.0)
        total = residual.sum()
        y = _sample(residual / total if total > 0.0 else p, rng)
        return Verdict(n_accepted=i, next_token=y)
    k = len(tokens)
    return Verdict(n_accepted=k, next_token=_sample(_distribution(target[k], "target", k), rng))


def _distribution(row: np.ndarray, name: str, i: int) -> np.ndarray:
    """Row as float64 probabilities summing to 1; ValueError if it is not a distribution."""
    p = np.asarray(row, dtype=np.float64)
    total = p.sum()
    if not np.isfinite(total) or abs(total - 1.0) > _SUM_TOL or (p < 0.0).any():
        raise ValueError(f"{name} row {i} is not a probability distribution (sum {total:.6g}); "
                         "pass probabilities when sampling")
    return p / total


def _sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF sample from ``p``; tokens with zero mass are never returned."""
    cdf = np.cumsum(p)
    idx = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    if idx >= len(p):  # u * total rounded up to total: take the last token with mass
        idx = int(np.flatnonzero(p)[-1])
    return idx
