"""N-gram prompt-lookup drafter: propose what followed the latest earlier occurrence of the suffix.

Matching: for n from ``ngram_max`` down to ``ngram_min``, look up the last ``n`` tokens of the
history among earlier n-grams; the first (longest) hit wins, and among occurrences of that
n-gram the most recent one. The proposal is the tokens that followed it, up to the end of the
history (a match may overlap the suffix, as in runs of repeated tokens).

Index: one dict from n-gram tuple to its latest start, kept incrementally. An n-gram is indexed
only once the token after it exists, so the suffix never matches itself, and each appended token
adds exactly ``ngram_max - ngram_min + 1`` entries: proposing after every token is O(1)
amortized. Rewinds and edits are detected by comparing the length and the first and last
``_CHECK`` indexed tokens; on any difference the index is rebuilt from scratch (rare: the loop
only appends accepted tokens). An edit that leaves both windows intact is not detected; call
``reset()`` when a conversation is replaced.

Adaptive length (per match length n, fed by ``feedback``): each n has a length limit that starts
at ``start_len``, doubles (up to ``draft_max``) after a fully accepted draft, and after a
rejection falls to ``max(1, n_accepted + 1, limit // 2)``: halving when the copy broke early,
keeping close to the accepted run when it broke late. So a draft is long only when drafts from
matches of that length have recently been accepted in full, and short ambiguous matches that
keep failing shrink to single tokens. Each n also keeps an acceptance EMA (accepted/proposed)
for statistics.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from engine.spec.draft import Draft

__all__ = ["Draft", "NgramDrafter", "NgramParams"]

log = logging.getLogger(__name__)

_CHECK = 16  # tokens compared at each end of the indexed history to detect rewinds and edits
_EMA_WEIGHT = 0.25  # weight of the newest feedback in the per-n acceptance EMA
_EMA_PRIOR = 0.5


@dataclass(frozen=True)
class NgramParams:
    """Drafter parameters.

    * ``ngram_min = 2``: single-token matches are too ambiguous (a newline, a bracket) to draft
      from; two tokens already pin down many places in code, and the adaptive limit keeps
      unreliable short matches short.
    * ``ngram_max = 5``: longer suffixes add little uniqueness, and every extra n costs one
      dict entry per token (same defaults as ``SpeculativeParams``).
    * ``start_len = 6``: a first draft of six tokens costs ~3 single steps on a 2-core CPU and
      about one on a GPU; it doubles quickly while copies succeed.
    * ``draft_max = 16``: the knee of the measured CPU curve (16 tokens verify in ~7 single
      steps, 32 in ~11); the loop's own cap and the controller trim further.
    """

    ngram_min: int = 2
    ngram_max: int = 5
    start_len: int = 6
    draft_max: int = 16

    def __post_init__(self) -> None:
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min}, {self.ngram_max}")
        if not 1 <= self.start_len <= self.draft_max:
            raise ValueError(f"need 1 <= start_len <= draft_max, got {self.start_len}, {self.draft_max}")


class NgramDrafter:
    """Prompt-lookup drafter over the growing history; see the module docstring for the policy."""

    name = "ngram"

    def __init__(self, params: NgramParams | None = None) -> None:
        self.params = params if params is not None else NgramParams()
        self._tokens: list[int] = []  # the history the index reflects
        self._index: dict[tuple[int, ...], int] = {}
        self._limit: dict[int, int] = {}
        self._ema: dict[int, float] = {}
        self._last_n = 0  # match length of the last non-empty proposal, 0 if none
        self.reset()

    # ------------------------------------------------------------------ public API

    def propose(self, history: Sequence[int], max_n: int) -> Draft:
        """Draft up to ``max_n`` tokens continuing ``history`` (prompt + generated so far)."""
        self._sync(history)
        self._last_n = 0
        toks = self._tokens
        length = len(toks)
        for n in range(min(self.params.ngram_max, length - 1), self.params.ngram_min - 1, -1):
            start = self._index.get(tuple(toks[length - n:]))
            if start is None:
                continue
            cap = min(max_n, self._limit[n])
            if cap <= 0:
                return Draft((), source=self.name)
            self._last_n = n
            return Draft(tuple(toks[start + n:start + n + cap]), source=self.name)
        return Draft((), source=self.name)

    def feedback(self, n_proposed: int, n_accepted: int) -> None:
        """Report how many of the last proposal's first ``n_proposed`` tokens were accepted."""
        if not 0 <= n_accepted <= n_proposed:
            raise ValueError(f"need 0 <= n_accepted <= n_proposed, got {n_accepted}, {n_proposed}")
        n = self._last_n
        if n == 0 or n_proposed == 0:
            return
        self._last_n = 0
        self._ema[n] += _EMA_WEIGHT * (n_accepted / n_proposed - self._ema[n])
        limit = self._limit[n]
        if n_accepted == n_proposed:
            self._limit[n] = min(self.params.draft_max, 2 * limit)
        else:
            self._limit[n] = max(1, n_accepted + 1, limit // 2)

    def reset(self) -> None:
        """Forget the history and the learned lengths."""
        p = self.params
        self._tokens = []
        self._index = {}
        self._limit = {n: p.start_len for n in range(p.ngram_min, p.ngram_max + 1)}
        self._ema = {n: _EMA_PRIOR for n in range(p.ngram_min, p.ngram_max + 1)}
        self._last_n = 0

    @property
    def last_match_len(self) -> int:
        """Length of the n-gram behind the last non-empty proposal (0 when it was empty)."""
        return self._last_n

    def limit(self, n: int) -> int:
        """Current draft-length limit for matches of length ``n``."""
        return self._limit[n]

    def acceptance(self, n: int) -> float:
        """EMA of accepted/proposed for drafts from matches of length ``n`` (prior 0.5)."""
        return self._ema[n]

    # ------------------------------------------------------------------ index

    def _sync(self, history: Sequence[int]) -> None:
        """Bring the index up to ``history``: append the new tokens, or rebuild on divergence."""
        old = len(self._tokens)
        new = len(history)
        if new < old or not self._prefix_intact(history, old):
            log.debug("history rewound or edited (%d indexed, %d now): rebuilding the index", old, new)
            self._tokens = []
            self._index = {}
            old = 0
        if new > old:
            self._append([int(t) for t in history[old:new]])

    def _prefix_intact(self, history: Sequence[int], old: int) -> bool:
        if old == 0:
            return True
        head = min(_CHECK, old)
        if [int(t) for t in history[:head]] != self._tokens[:head]:
            return False
        return [int(t) for t in history[old - head:old]] == self._tokens[old - head:old]

    def _append(self, new_tokens: list[int]) -> None:
        toks = self._tokens
        index = self._index
        lo, hi = self.params.ngram_min, self.params.ngram_max
        for tok in new_tokens:
            # The token at position e = len(toks) completes the continuation of every n-gram
            # ending just before it: those become matchable now.
            e = len(toks)
            for n in range(lo, min(hi, e) + 1):
                index[tuple(toks[e - n:e])] = e - n
            toks.append(tok)
