"""How often has copying been right, by how long the match was? Learned from every token.

After each token of a reply the n-gram drafter makes a *shadow* prediction: the token that
followed the matched n-gram, as a draft would propose it. When the next token arrives the
prediction is scored, whether or not anything was drafted: so the estimate keeps learning while
speculation is off (open chat), and no probe drafts are needed to find out that it pays again.

Predictions are grouped by ``match_len`` (how far back the history agrees with the matched
context): a fresh two-token coincidence is a guess, a 32-token agreement is a copy in progress.
Short matches are further split by whether they were found next to where the last copy broke
off (``near``: a copy resuming after an edit, usually right) or anywhere (usually a guess).
Per bucket, hits and trials decay by ``decay`` per observation (the reply's recent behaviour
counts most) on top of ``PRIOR_WEIGHT`` pseudo-trials at the bucket's prior.

A draft of k tokens starting at match length m is accepted through token j with probability
``prod_{i<j} p(m + i) * q(t_i)``: each accepted token extends the agreement by one, and
``q(t)`` is how often a copy in progress (``match_len >= SPLIT_BELOW``) went on past the token
``t`` in this reply. Edits happen at recurring places: after `` def`` when methods are renamed,
after ``):`` when docstrings are added; a copy that broke there before will likely break there
again, so a draft that crosses such a token is worth less past it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

__all__ = ["MatchReliability"]

BUCKET_STARTS = (0, 4, 8, 16, 32)  # match_len buckets: 0-3, 4-7, 8-15, 16-31, 32+
SPLIT_BELOW = 8  # shorter matches keep separate statistics when found near the anchor
# Per bucket, the share of shadow predictions that were right, measured: the mean over replies
# (each with at least five predictions in the bucket) of 16 suite prompts, two per category,
# greedy 200-token replies of the 0.5B model (`scripts/simulate_spec.py --record
# --suite 2 --model draft`, then counted by bucket). Long agreements are copies in progress
# (0.94, 0.99); a short match anywhere is right about half the time, and a short match next to
# where a copy broke off is right less often than that (0.46: an edit often goes on). The
# earlier hand-set priors (0.3, 0.5, 0.9, 0.93, 0.95, 0.8, 0.9) were too sure of short matches
# near an anchor and far too doubtful of long copies: drafts grew slowly on a copy.
PRIORS = (0.5, 0.65, 0.78, 0.94, 0.99, 0.46, 0.69)
PRIOR_WEIGHT = 4.0
DECAY = 0.98  # per observation in a bucket: memory of about 50 predictions
AFTER_PRIOR = 2.0  # pseudo-copies that went on past any token


class MatchReliability:
    """Per-``match_len`` probability that the copied token is the one the target emits."""

    def __init__(self, decay: float = DECAY) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self.reset()

    def reset(self) -> None:
        self._hits = [0.0] * len(PRIORS)
        self._trials = [0.0] * len(PRIORS)
        self._after: dict[tuple[int, int], list[int]] = {}  # token -> [copies that went on past it, trials]

    @staticmethod
    def bucket(match_len: int, near: bool = False) -> int:
        b = bisect.bisect_right(BUCKET_STARTS, max(0, match_len)) - 1
        if near and match_len < SPLIT_BELOW:
            return len(BUCKET_STARTS) + b
        return b

    def observe(self, match_len: int, near: bool, hit: bool, after: tuple[int, int] | None = None) -> None:
        """Score one prediction made at ``match_len`` (``near`` the anchor), right after the
        token ``after``."""
        b = self.bucket(match_len, near)
        self._hits[b] = self.decay * self._hits[b] + (1.0 if hit else 0.0)
        self._trials[b] = self.decay * self._trials[b] + 1.0
        if after is not None and match_len >= SPLIT_BELOW:
            counts = self._after.setdefault(after, [0, 0])
            counts[0] += hit
            counts[1] += 1

    def q(self, after: tuple[int, int]) -> float:
        """How often a copy went on past ``after`` (1 until it has broken there)."""
        hits, trials = self._after.get(after, (0, 0))
        return (hits + AFTER_PRIOR) / (trials + AFTER_PRIOR)

    def p(self, match_len: int, near: bool = False) -> float:
        b = self.bucket(match_len, near)
        return (self._hits[b] + PRIORS[b] * PRIOR_WEIGHT) / (self._trials[b] + PRIOR_WEIGHT)

    def survival(self, match_len: int, near: bool, after: Sequence[tuple[int, int]],
                 trust: Sequence[float] | None = None) -> list[float]:
        """P(the first j drafted tokens are all accepted), j = 1..len(after); ``after[i]`` is
        the pair of tokens before draft token i (from the history, then the draft's own), and
        ``trust[i]`` an extra factor for token i (a learned edit the copy applies there)."""
        out, s = [], 1.0
        for i, pair in enumerate(after):
            s *= self.p(match_len + i, near) * self.q(pair) * (trust[i] if trust is not None else 1.0)
            out.append(s)
        return out
