"""Binding a saved KV state to its transcript: what the model predicts after its last tokens.

A section checksum catches accidents, not intent: anyone can pair one conversation's text with
another's KV section and recompute the checksum. So a saved state also records a probe: the
last ``PROBE_TOKENS`` tokens are decoded again on top of the rest of the cache and the top
``PROBE_TOP`` logits of each are kept in the metadata (a few hundred bytes). On opening, after
the state is restored, the same tokens are decoded again and their logits must agree within
``TOLERANCE``; a KV section that belongs to other text (or was altered in any way that changes
what the model would say next) fails, and the conversation falls back to its text.

This costs one decode of two tokens at saving and at opening. It is an integrity check, not a
signature: someone with the same model can still build a state and a matching probe.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from engine.conversation.session.meta import Probe
from engine.errors import DecodeError, RewindError

if TYPE_CHECKING:
    from engine.llama.context import LlamaSequence

log = logging.getLogger(__name__)

PROBE_TOKENS = 2
PROBE_TOP = 16
TOLERANCE = 0.02


def _redecode(ctx: LlamaSequence, n: int) -> np.ndarray:
    """Decode the last ``n`` tokens of ``ctx`` again (on top of the others); their logits."""
    tokens = list(ctx.tokens)
    ctx.rewind(len(tokens) - n)
    ctx.decode(tokens[-n:], logits="all")
    return np.array(ctx.logits_rows(), dtype=np.float32, copy=True)


def redecode(ctx: LlamaSequence) -> None:
    """Decode the tokens a probe covers again (their cells move to the sequence's end)."""
    n = min(PROBE_TOKENS, len(ctx.tokens))
    if n:
        _redecode(ctx, n)


def take(ctx: LlamaSequence) -> Probe | None:
    """The probe of ``ctx``'s current state (its tokens are unchanged); None when it has no
    tokens or cannot rewind (recurrent models)."""
    n = min(PROBE_TOKENS, len(ctx.tokens))
    if n == 0:
        return None
    try:
        rows = _redecode(ctx, n)
    except (RewindError, DecodeError) as e:
        log.info("no probe for the saved state: %s", e)
        return None
    out = []
    for row in rows:
        top = np.argpartition(row, -PROBE_TOP)[-PROBE_TOP:] if row.size > PROBE_TOP else \
            np.arange(row.size)
        top = top[np.argsort(-row[top], kind="stable")]
        out.append(tuple((int(t), float(row[t])) for t in top))
    return Probe(tuple(out))


def mismatch(ctx: LlamaSequence, probe: Probe) -> str | None:
    """None when ``ctx`` (just restored) predicts what ``probe`` recorded; else why not. The
    last tokens' cells are recomputed either way."""
    n = len(probe.rows)
    if n > len(ctx.tokens):
        return "its check covers more tokens than it holds"
    try:
        rows = _redecode(ctx, n)
    except (RewindError, DecodeError) as e:
        return f"it could not be checked ({e})"
    worst = 0.0
    for saved, row in zip(probe.rows, rows):
        ids = np.array([t for t, _ in saved], dtype=np.int64)
        if int(ids.max()) >= row.size:
            return "its check names tokens outside the vocabulary"
        diff = np.abs(row[ids].astype(np.float64) - np.array([v for _, v in saved]))
        # a better favourite than the saved one counts as a difference too
        diff = np.append(diff, float(row.max()) - saved[0][1])
        if not np.all(np.isfinite(diff)) or not np.isfinite(row).all():
            return "it does not belong to the conversation's text (it predicts nothing sane)"
        worst = max(worst, float(diff.max()))
    if worst > TOLERANCE:
        log.warning("the restored KV state predicts differently (logits differ by up to %.3g)",
                    worst)
        return "it does not belong to the conversation's text"
    return None
