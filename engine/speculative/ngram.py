"""N-gram prompt-lookup drafter: propose what followed the latest earlier occurrence of the suffix.

Matching: for n from ``ngram_max`` down to ``ngram_min``, look up the last ``n`` tokens of the
history among earlier n-grams; the first (longest) hit wins, and among occurrences of that
n-gram the most recent one. The proposal is the tokens that followed it, up to the end of the
history (a match may overlap the suffix, as in runs of repeated tokens).

Index: one dict from n-gram tuple to its latest start, kept incrementally. An n-gram is indexed
only once the token after it exists, so the suffix never matches itself, and each appended token
adds exactly ``ngram_max - ngram_min + 1`` entries: proposing after every token is O(1)
amortized. At the start of a reply, ``begin(prompt)`` compares the whole indexed history with
the prompt and rebuilds the index from scratch where they part (a regenerated or edited turn,
another conversation); within a reply the generator only appends accepted tokens. Callers that
propose without ``begin`` get a cheaper guard: the length and the first and last ``_CHECK``
indexed tokens are compared, and the index is rebuilt on any difference.

Memory: text that ``begin`` finds rewound away (the reply a regenerate replaces, the turn an
edit replaces, another conversation) is not forgotten: up to ``MEMORY_TOKENS`` of it stay
indexed in front of the history, each span with the ``MEMORY_CONTEXT`` tokens that led to it.
A regenerated or retried request, or a reply to an edited question, often says much of what
the replaced reply said. The history's own occurrences come later and so win every tie. A reply
to the very prompt that a remembered reply followed (a regenerate, a retry) starts by drafting
that reply. Otherwise a match found only in memory is drafted only where the *reply* agrees
with the text before it over ``MEMORY_MIN_AGREE`` tokens: agreement with the prompt's end says
nothing there (two requests to edit the same file end with the same code and get different
replies), and a short match (a code fence, a stock phrase) is as likely another request's reply
as this one's. ``reset()`` forgets the memory too.

Within a reply (after ``begin(prompt)``) the drafter predicts the next token after every token
and scores the prediction when the token arrives (engine.speculative.reliability), drafted or not. A
right prediction continues the same copy (the next source token, not the latest occurrence of
the n-gram, which in a reply that repeats itself is often an earlier part of the reply). A
wrong one leaves an *anchor* where the copy broke off: an edit replaces, inserts or drops a
few tokens, and the copy resumes just after, so the ``NEAR`` tokens after the anchor are
searched first, for the position whose preceding text agrees longest with the history's end
(one token of agreement is enough there; anywhere else it takes an n-gram). When the copy
resumes, what the reply wrote in place of the skipped source is learned as an edit
(engine.speculative.edits), and later copies of the same source span are drafted with the edit made:
after ``item`` has been renamed ``entry`` once, every later ``item`` is drafted as ``entry``.

Confidence: with each proposal comes ``match_len``, how far back (up to ``MATCH_CAP`` tokens)
the history agrees with the text before the matched continuation, and ``survival``: the
estimated probability that each prefix of the draft is accepted, from the scored predictions.
The speculator turns that into a draft length with the target's cost curve.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from engine.speculative.draft import Draft
from engine.speculative.edits import Edit, EditMemory
from engine.speculative.reliability import MatchReliability
from engine.speculative.styles import Vocab

__all__ = ["Draft", "NgramDrafter", "NgramParams"]

log = logging.getLogger(__name__)

_CHECK = 16  # tokens compared at each end of the indexed history to detect rewinds and edits
MATCH_CAP = 32  # match_len is counted up to this many tokens
NEAR = 24  # how far past the anchor a resuming copy is looked for
ANCHOR_TTL = 64  # tokens after which an anchor that found nothing is dropped
# Rewound text kept matchable: several replies' worth, and at most ~16k dict entries more to
# rebuild at a reply's start (indexing a 900-token prompt takes 3 ms: about 13 ms more here).
MEMORY_TOKENS = 4096
MEMORY_CONTEXT = 16  # tokens before a rewound span kept with it, so its start can be matched
# Reply tokens that must agree with a remembered match. Measured on the 1.5B (200 greedy tokens,
# the shipped edit prompts, which share one module): with the prompt's end counted as agreement,
# a rename edit after a bug-fix edit of the same module first drafted 47 tokens of the bug-fix
# reply (2 accepted) and then ran 24.4 tok/s against 29.4 with no memory.
MEMORY_MIN_AGREE = 16


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


class _Prediction(NamedTuple):
    token: int  # the predicted token
    at: int  # the source position it stands for (for an edit: where the edited span starts)
    resume: int  # where the copy goes on once this token (and the rest of its edit) is confirmed
    match_len: int  # how far back the history agrees with the text before ``at``
    near: bool  # found next to where the last copy broke off (a copy resuming after an edit)
    pending: tuple[int, ...] = ()  # the rest of the edit's output, after ``token``
    edit: Edit | None = None  # the learned edit this token comes from


class NgramDrafter:
    """Prompt-lookup drafter over the growing history; see the module docstring for the policy."""

    name = "ngram"

    def __init__(self, params: NgramParams | None = None, vocab: Vocab | None = None) -> None:
        """``vocab``: the target's tokenizer, to learn identifier styles and renames (engine.speculative.styles)."""
        self.params = params if params is not None else NgramParams()
        self.reliability = MatchReliability()
        self.edits = EditMemory(vocab)
        self._tokens: list[int] = []  # remembered text, then the history: what the index reflects
        self._mem_len = 0  # how many of ``_tokens`` are remembered text (in front of the history)
        self._index: dict[tuple[int, ...], int] = {}
        self._learn_from: int | None = None  # predictions are scored from this position on
        self._next: _Prediction | None = None  # the prediction for the next token
        self._anchor: int | None = None  # where the last copy broke off (or goes on)
        self._anchor_age = 0  # tokens since the anchor was last confirmed
        self._broke: tuple[int, int] | None = None  # (source, history) positions where a copy broke off

    # ------------------------------------------------------------------ public API

    def begin(self, prompt: Sequence[int]) -> None:
        """A reply to ``prompt`` starts: index it, and score predictions from its end on."""
        self.reliability.reset()
        self.edits.clear()
        self.edits.learn_stated(prompt)
        self._learn_from = None
        history = self.history
        kept = 0
        for a, b in zip(history, prompt):
            if a != int(b):
                break
            kept += 1
        retry = None  # where the reply that followed this very prompt is remembered
        if kept < len(history):  # the index cannot be cut back: remember what goes, rebuild
            gone = history[max(0, kept - MEMORY_CONTEXT):]
            memory = (self._tokens[:self._mem_len] + gone)[-MEMORY_TOKENS:]
            self._reindex(memory)
            if kept == len(prompt) and len(history) - kept < len(memory):
                retry = len(memory) - (len(history) - kept)
        self._sync(prompt)
        self._learn_from = len(self._tokens)
        self._anchor = None
        self._next = self._copy_at(retry, MATCH_CAP, False) if retry is not None else self._predict(None)

    @property
    def history(self) -> list[int]:
        """The history the index reflects (without the remembered text)."""
        return self._tokens[self._mem_len:]

    def propose(self, history: Sequence[int], max_n: int) -> Draft:
        """Up to ``max_n`` tokens continuing ``history``, with the match's ``match_len`` and the
        estimated probability that each prefix of them is accepted (``survival``)."""
        self._sync(history)
        nxt = self._next
        if max_n <= 0 or nxt is None:
            return Draft((), source=self.name)
        tokens, trust = self._continuation(nxt, max_n)
        seq = (self._tokens[-2], self._tokens[-1], *tokens[:-1])
        after = tuple(zip(seq, seq[1:]))
        survival = self.reliability.survival(nxt.match_len, nxt.near, after, trust)
        return Draft(tokens, source=self.name, match_len=nxt.match_len, survival=tuple(survival))

    def reset(self) -> None:
        """Forget the history, the remembered text and the learned edits."""
        self._reindex([])
        self.edits.clear()

    # ------------------------------------------------------------------ index

    def _reindex(self, memory: list[int]) -> None:
        """Start over with ``memory`` as the remembered text and no history."""
        self._tokens, self._index, self._mem_len = [], {}, 0
        self._next = None
        self._learn_from = None  # a rewritten history is not evidence about this reply
        self._anchor = None
        self._broke = None
        if memory:
            self._append(memory)
            self._mem_len = len(memory)

    def _sync(self, history: Sequence[int]) -> None:
        """Bring the index up to ``history``: append the new tokens, or rebuild on divergence."""
        base = self._mem_len
        old = len(self._tokens) - base
        new = len(history)
        if new < old or not self._prefix_intact(history, old):
            log.debug("history rewound or edited (%d indexed, %d now): rebuilding the index", old, new)
            self._reindex(self._tokens[:base])
            old = 0
        if new > old:
            self._append([int(t) for t in history[old:new]])

    def _prefix_intact(self, history: Sequence[int], old: int) -> bool:
        if old == 0:
            return True
        base = self._mem_len
        head = min(_CHECK, old)
        if [int(t) for t in history[:head]] != self._tokens[base:base + head]:
            return False
        return [int(t) for t in history[old - head:old]] == self._tokens[base + old - head:base + old]

    def _append(self, new_tokens: list[int]) -> None:
        toks = self._tokens
        index = self._index
        lo, hi = self.params.ngram_min, self.params.ngram_max
        last = len(toks) + len(new_tokens)
        for tok in new_tokens:
            # The token at position e = len(toks) completes the continuation of every n-gram
            # ending just before it: those become matchable now.
            e = len(toks)
            prev = self._next
            hit = prev is not None and prev.token == tok
            learning = self._learn_from is not None and e >= self._learn_from
            if prev is not None and learning:
                self.reliability.observe(prev.match_len, prev.near, hit, (toks[-2], toks[-1]))
            for n in range(lo, min(hi, e) + 1):
                index[tuple(toks[e - n:e])] = e - n
            toks.append(tok)
            if learning or e + 1 == last:
                self._next = self._predict(prev if learning else None, hit)

    # ------------------------------------------------------------------ matching

    def _predict(self, prev: _Prediction | None, hit: bool = False) -> _Prediction | None:
        """The prediction for the token after the history, given the last one and its outcome.

        A copy that was right goes on. One that was wrong leaves an anchor where it broke off:
        an edit replaces, inserts or drops a few tokens and the copy resumes just after, so the
        source next to the anchor is searched before the latest occurrence anywhere (which in
        a reply that repeats itself is often an earlier part of the reply, not the source).
        """
        if prev is not None:
            if not hit:
                self._broke_off(prev)
            elif (nxt := self._go_on(prev)) is not None:
                return nxt
        self._anchor_age += 1
        if self._anchor is not None and self._anchor_age <= ANCHOR_TTL:
            near = self._near_anchor()
            if near is not None:
                return near
        return self._latest()

    def _go_on(self, prev: _Prediction) -> _Prediction | None:
        """``prev`` was right: the copy goes on (through the rest of an edit it applies)."""
        match_len = min(MATCH_CAP, prev.match_len + 1)
        if self._broke is not None and prev.near:
            self._learn_edit(prev)
        self._broke = None
        self._anchor, self._anchor_age = prev.resume, 0
        if prev.pending:
            return prev._replace(token=prev.pending[0], pending=prev.pending[1:], match_len=match_len)
        if prev.edit is not None:
            self.edits.confirm(prev.edit, True)
        return self._copy_at(prev.resume, match_len, prev.near)

    def _broke_off(self, prev: _Prediction) -> None:
        """``prev`` was wrong: remember where the copy broke off, in its source and the reply."""
        if prev.edit is not None:
            self.edits.confirm(prev.edit, False)
        copying = self._anchor is not None and self._anchor_age == 0  # the last prediction held
        if self._anchor is None or self._anchor_age > ANCHOR_TTL:
            self._anchor, self._anchor_age, self._broke = prev.at, 0, None
        if copying and (prev.edit is None or prev.pending == prev.edit.output[1:]):
            self._broke = (prev.at, len(self._tokens) - 1)  # the copy was right up to here

    def _learn_edit(self, prev: _Prediction) -> None:
        """A copy broke off and has resumed (``prev``, found next to the break, was right):
        the reply replaced the source between the two by what it wrote in between."""
        src_broke, out_broke = self._broke
        src_back = prev.at - prev.match_len  # where the agreement that found ``prev`` starts
        out_back = len(self._tokens) - 1 - prev.match_len
        if src_back >= src_broke and out_back >= out_broke:
            self.edits.learn(self._tokens[src_broke:src_back], self._tokens[out_broke:out_back])
            self.edits.learn_style(self._tokens, src_broke, out_broke)

    def _copy_at(self, pos: int, match_len: int, near: bool) -> _Prediction | None:
        """The prediction that the copy continues with the source at ``pos`` (edited as learned)."""
        toks = self._tokens
        edit = self.edits.at(toks, pos)
        if edit is None:
            return _Prediction(toks[pos], pos, pos + 1, match_len, near) if pos < len(toks) else None
        resume = pos + len(edit.source)
        if edit.output:
            return _Prediction(edit.output[0], pos, resume, match_len, near, edit.output[1:], edit)
        if resume < len(toks):  # the edit drops the span
            return _Prediction(toks[resume], pos, resume + 1, match_len, near, (), edit)
        return None

    def _continuation(self, nxt: _Prediction, max_n: int) -> tuple[tuple[int, ...], list[float]]:
        """Up to ``max_n`` tokens from ``nxt`` on, through the learned edits, and for each the
        trust in the edit it starts (1 for plain copying)."""
        out: list[int] = []
        trust: list[float] = []
        pred = nxt
        while pred is not None and len(out) < max_n:
            out.append(pred.token)
            starts_edit = pred.edit is not None and pred.pending == pred.edit.output[1:]
            trust.append(pred.edit.trust if starts_edit else 1.0)
            pred = (pred._replace(token=pred.pending[0], pending=pred.pending[1:]) if pred.pending
                    else self._copy_at(pred.resume, pred.match_len, pred.near))
        return tuple(out), trust

    def _near_anchor(self) -> _Prediction | None:
        """The position within ``NEAR`` tokens after the anchor whose preceding text agrees
        longest with the end of the history (at least one token), the nearest on ties."""
        length = len(self._tokens)
        best: tuple[int, int] | None = None
        for src in range(self._anchor, min(self._anchor + NEAR, length - 1) + 1):
            agree = self._agreement(src, 0)
            if src <= self._mem_len and not self._reply_agrees(agree):
                continue
            if agree and (best is None or agree > best[1]):
                best = (src, agree)
        return self._copy_at(best[0], best[1], True) if best is not None else None

    def _latest(self) -> _Prediction | None:
        """The continuation of the latest earlier occurrence of the longest suffix n-gram."""
        toks = self._tokens
        length = len(toks)
        for n in range(min(self.params.ngram_max, length - 1), self.params.ngram_min - 1, -1):
            start = self._index.get(tuple(toks[length - n:]))
            if start is None:
                continue
            agree = self._agreement(start + n, n)
            if start + n <= self._mem_len and not self._reply_agrees(agree):
                continue  # only in the remembered text, and the reply does not show it is the same
            return self._copy_at(start + n, agree, False)
        return None

    def _reply_agrees(self, agree: int) -> bool:
        """Whether an agreement of ``agree`` tokens with remembered text, counting only the
        reply's tokens, is enough to draft from it."""
        if self._learn_from is None:
            return False
        return min(agree, len(self._tokens) - self._learn_from) >= MEMORY_MIN_AGREE

    def _agreement(self, src: int, known: int) -> int:
        """How many tokens (up to ``MATCH_CAP``) before ``src`` equal the end of the history,
        the first ``known`` of them already checked."""
        toks = self._tokens
        length = len(toks)
        agree = known
        while (agree < MATCH_CAP and src - agree - 1 >= 0
               and toks[src - agree - 1] == toks[length - agree - 1]):
            agree += 1
        return agree
