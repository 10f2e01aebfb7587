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

Confidence: with each proposal comes ``match_len``, how far back (up to ``MATCH_CAP`` tokens)
the history agrees with the text before the matched continuation. A reply that is copying its
context agrees for dozens of tokens; a fresh two-token coincidence agrees for two. The
speculator turns that into a draft length with the target's cost curve (engine.spec.speculator).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from engine.spec.draft import Draft

__all__ = ["Draft", "NgramDrafter", "NgramParams"]

log = logging.getLogger(__name__)

_CHECK = 16  # tokens compared at each end of the indexed history to detect rewinds and edits
MATCH_CAP = 32  # match_len is counted up to this many tokens


@dataclass(frozen=True)
class NgramParams:
    """* ``ngram_min = 2``: single-token matches are too ambiguous (a newline, a bracket) to
    draft from; two tokens already pin down many places in code.
    * ``ngram_max = 5``: longer suffixes add little uniqueness, and every extra n costs one dict
    entry per token; ``match_len`` measures longer agreement separately."""

    ngram_min: int = 2
    ngram_max: int = 5

    def __post_init__(self) -> None:
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min}, {self.ngram_max}")


class NgramDrafter:
    """Prompt-lookup drafter over the growing history; see the module docstring for the policy."""

    name = "ngram"

    def __init__(self, params: NgramParams | None = None) -> None:
        self.params = params if params is not None else NgramParams()
        self._tokens: list[int] = []  # the history the index reflects
        self._index: dict[tuple[int, ...], int] = {}

    # ------------------------------------------------------------------ public API

    def propose(self, history: Sequence[int], max_n: int) -> Draft:
        """Up to ``max_n`` tokens continuing ``history``, with the match's ``match_len``."""
        self._sync(history)
        toks = self._tokens
        length = len(toks)
        if max_n <= 0:
            return Draft((), source=self.name)
        for n in range(min(self.params.ngram_max, length - 1), self.params.ngram_min - 1, -1):
            start = self._index.get(tuple(toks[length - n:]))
            if start is None:
                continue
            agree = n
            while (agree < MATCH_CAP and start - (agree - n) - 1 >= 0
                   and toks[start - (agree - n) - 1] == toks[length - agree - 1]):
                agree += 1
            return Draft(tuple(toks[start + n:start + n + max_n]), source=self.name, match_len=agree)
        return Draft((), source=self.name)

    def feedback(self, n_proposed: int, n_accepted: int) -> None:
        """Nothing to learn here: the speculator keeps the statistics."""

    def reset(self) -> None:
        """Forget the history."""
        self._tokens = []
        self._index = {}

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
