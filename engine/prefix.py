"""Where a cached token sequence and a new prompt agree: the shared head, and the span a
context shift can keep when the oldest turns were dropped to fit (engine.state_cache and
engine.generate both ask; neither imports the other for it)."""

from __future__ import annotations

from typing import Sequence

import numpy as np


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
