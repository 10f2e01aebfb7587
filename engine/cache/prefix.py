"""Where a cached token sequence and a new prompt agree, and bringing a context there: the
shared head, the span a context shift can keep when the oldest turns were dropped to fit, and
``align``, which makes a sequence hold the reusable part of a prompt (the scheduler, the state
cache and the draft model all ask; none imports another for it)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from engine.llama.context import LlamaSequence

log = logging.getLogger(__name__)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


MIN_SHIFT_GAIN = 16  # tokens a cache shift must save over a rewind to be worth it
MAX_SHIFT_CANDIDATES = 512  # where the kept part may start (usually a message boundary)


def dropped_span(cached: Sequence[int], prompt: Sequence[int]) -> tuple[int, int, int] | None:
    """(p, d, kept) when ``prompt`` starts with ``cached[:p] + cached[p+d:p+d+kept]``: the
    oldest turns after the shared head (the system prompt) were dropped to fit the context.
    Picks the span keeping most tokens; None when no shift keeps more than rewinding to p."""
    p = common_prefix(cached, prompt)
    if p >= len(cached) or p >= len(prompt):
        return None
    old = np.asarray(cached[p:], dtype=np.int64)
    new = np.asarray(prompt[p:], dtype=np.int64)
    best: tuple[int, int, int] | None = None
    for d in np.nonzero(old == new[0])[0][:MAX_SHIFT_CANDIDATES]:
        n = min(len(old) - d, len(new))
        same = old[d:d + n] == new[:n]
        kept = n if same.all() else int(np.argmin(same))
        if kept >= MIN_SHIFT_GAIN and (best is None or kept > best[2]):
            best = (p, int(d), kept)
    return best


def align(ctx: LlamaSequence, prompt: Sequence[int]) -> tuple[int, int, str | None]:
    """Make ``ctx`` hold the longest reusable part of ``prompt``; return (tokens reused,
    tokens dropped by a cache shift, why a shift was not possible or None).

    Reuses the common prefix; when the conversation outgrew the context and its oldest turns
    were dropped, removes them from the cache and shifts the rest down instead of recomputing
    it. At least the last prompt token is left to decode (its logits are needed)."""
    shift = dropped_span(ctx.tokens, prompt)
    dropped, note = 0, None
    if shift is not None:
        p, d, _ = shift
        if ctx.drop(p, p + d):
            dropped = d
        else:
            note = (f"{ctx.model.display_name} cannot shift its cache: the "
                    f"{len(ctx.tokens) - p - d} tokens after the dropped turns are recomputed")
            log.info(note)
    reuse = min(common_prefix(ctx.tokens, prompt), len(prompt) - 1)
    ctx.rewind(reuse)
    return reuse, dropped, note

