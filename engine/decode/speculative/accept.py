"""The accept step of speculative decoding: one pure function of (draft, pick).

The target has scored ``[last, d1, ..., dk]`` in one batch; ``pick(i)`` is the token the target
itself picks after ``last, d1, ..., d_i`` from row ``i`` of that batch (``pick(k)`` is the bonus
token that follows a fully accepted draft). A draft token is kept while it *is* that token.

Why the output is exactly what the target alone would emit: ``pick`` is the sampler's own rule
(engine.decode.sampling) — the argmax for greedy decoding; for sampling, the argmax of log-probabilities
plus Gumbel noise that depends only on the seed and the position, so the target alone would draw
the same token at that position from the same row. Plain decoding emits ``pick(0)``, then, given
that token, ``pick(1)``, ...; rows past the first mismatch are never used, so the emitted tokens
are token for token those of plain decoding. Each sampled token is a Gumbel-max draw, i.e. a
sample of the target's distribution (with its penalties, truncation and grammar), whatever
drafted it. ``pick(i)`` is called in order, once per row, and only while every earlier draft
token was kept, so a caller may advance per-row state (a grammar) inside it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Verdict", "accept"]


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verification pass.

    The caller emits ``draft[:n_accepted]`` followed by ``next_token``, i.e. ``n_accepted + 1``
    tokens, and rewinds its caches past the rejected drafts.
    """

    n_accepted: int  # how many draft tokens were accepted (0..k)
    next_token: int  # the target's correction (on rejection) or bonus token (after full acceptance)


def accept(draft: Sequence[int], pick: Callable[[int], int]) -> Verdict:
    """Keep the longest prefix of ``draft`` that equals the target's picks; then its next pick."""
    for i, token in enumerate(draft):
        chosen = pick(i)
        if chosen != int(token):
            return Verdict(n_accepted=i, next_token=chosen)
    return Verdict(n_accepted=len(draft), next_token=pick(len(draft)))
