"""What a drafter proposes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Draft:
    """Proposed continuation. ``probs`` (k, n_vocab): the draft's sampling distributions, present
    only for a draft model sampling at temperature > 0. ``seconds``: time spent drafting.
    ``match_len``: for n-gram drafts, how many tokens of history agree with the matched context.
    ``survival``: where the drafter can tell, P(the first j tokens are all accepted), j = 1..k."""

    tokens: tuple[int, ...] = ()
    probs: np.ndarray | None = None
    source: str = "none"
    seconds: float = 0.0
    match_len: int = 0
    survival: tuple[float, ...] = ()
