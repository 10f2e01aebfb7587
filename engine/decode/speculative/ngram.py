"""The n-gram drafter: what can be drafted by copying earlier text.

One structure: the tokens seen (remembered text, then the history) and an index from each n-gram
(``ngram_min`` to ``ngram_max`` tokens) to its latest start. After every token the drafter
predicts the next as a copy: a right prediction goes on with the next source token; after a
wrong one the copy is sought within ``edit_span`` tokens after where it broke off (one token of
agreement is enough there), then at the latest occurrence of the longest suffix n-gram. What the
reply wrote instead of the source it skipped is learned as an edit or rename (engine.decode.speculative.
edits). A draft is the copy ahead; the copy odds (engine.decode.speculative.controller) score every
prediction, drafted or not, and give the draft's ``survival``.

Rewound text (a regenerated reply, an edited turn) stays indexed in front of the history, up to
``memory_tokens``: the same prompt again drafts the reply it had from its first token; elsewhere a
match only there is drafted once ``agree_cap`` tokens of the reply agree with it.

Tokens a grammar forced (``propose``'s ``forced``) are copied but neither scored nor counted as
agreement: every copy of one structure agrees on them (counted, a JSON schema's keys made each
item look like a sure copy of the one before, and 15-token drafts failed at once;
docs/benchmarks/structured.md). In a reply a grammar shapes, a copy resumed near a break (each
item resumes the one before around its values) gets the odds of one the lookup found. The chat
template's control tokens (``<|im_start|>``) are not counted as agreement either: every turn
has them, so a reply's first tokens agreed with each earlier reply's opening over them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from engine.decode.speculative.controller import CopyOdds
from engine.decode.speculative.draft import Draft
from engine.decode.speculative.edits import Edit, Edits
from engine.decode.speculative.tuning import TUNING, Tuning
from engine.llama.model import Model

__all__ = ["NgramDrafter"]


class _Copy(NamedTuple):
    """The prediction that the reply copies ``token`` next."""

    token: int
    at: int  # the source position it stands for (an edit's: where its source starts)
    resume: int  # where the copy goes on once this token (and the rest of its edit) is right
    agree: int  # tokens before ``at`` that agreed with the reply when found, plus those copied since
    near: bool  # found after where a copy broke off (so it may close an edit)
    pending: tuple[int, ...] = ()  # the rest of the edit's output
    edit: Edit | None = None  # the learned edit made here


class NgramDrafter:
    name = "ngram"
    _tokens: list[int]  # the remembered text, then the history
    _index: dict[tuple[int, ...], int]  # n-gram -> its latest start in ``_tokens``
    _mem_len: int  # how many of ``_tokens`` are remembered text
    _reply_from: int | None  # predictions are scored from here on
    _next: _Copy | None  # the prediction for the next token
    _anchor: int | None  # the source position where the last copy broke off or goes on
    _age: int  # tokens since the anchor was set or confirmed
    _broke: tuple[int, int] | None  # (source, reply) positions where a copy broke off
    _forced: set[int]  # positions in ``_tokens`` of tokens a grammar forced, and of control tokens
    _last_forced: int  # the last a grammar forced (-1: none)

    def __init__(self, vocab: Model | None = None, *, ngram_min: int = 2, ngram_max: int = 5,
                 odds: CopyOdds | None = None, tuning: Tuning = TUNING) -> None:
        """``vocab``: the target's tokenizer, to learn renames (only token edits without it)."""
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.sizes = range(ngram_max, ngram_min - 1, -1)
        self.odds = odds if odds is not None else CopyOdds(tuning)
        self.edits = Edits(vocab, tuning.edit_span)
        self._control = vocab.is_control if vocab is not None else lambda _: False
        self.tuning = tuning
        self._reindex([])

    @property
    def history(self) -> list[int]:  # what the index reflects, less the remembered text
        return self._tokens[self._mem_len:]

    def begin(self, prompt: Sequence[int]) -> None:
        """A reply to ``prompt`` starts: index it, and score predictions from its end on."""
        self.odds.reset()
        self.edits.clear()
        history, prompt = self.history, [int(t) for t in prompt]
        kept = next((i for i, (a, b) in enumerate(zip(history, prompt, strict=False)) if a != b),
                    min(len(history), len(prompt)))
        retry = None  # where the reply that followed this very prompt is remembered
        if kept < len(history):  # the index cannot be cut back: remember what goes, rebuild
            memory = self._tokens[:self._mem_len] + history[max(0, kept - self.tuning.agree_cap):]
            self._reindex(memory[max(0, len(memory) - self.tuning.memory_tokens):])
            if kept == len(prompt) and len(history) - kept < self._mem_len:
                retry = self._mem_len - (len(history) - kept)
        self._reply_from = self._anchor = self._broke = None
        self._sync(prompt)
        self._reply_from = len(self._tokens)
        # a retry agrees with the remembered reply's context over the whole prompt
        self._next = self._predict(None, False) if retry is None else self._copy_at(retry, len(prompt), False)

    def propose(self, history: Sequence[int], max_n: int, forced: int = 0) -> Draft:
        """Up to ``max_n`` tokens continuing ``history``, whose last ``forced`` tokens a
        grammar forced."""
        self._sync(history, forced)
        first = copy = self._next
        tokens: list[int] = []
        trust: list[float] = []
        while copy is not None and len(tokens) < max_n:
            tokens.append(copy.token)
            trust.append(copy.edit.rule.trust if copy.edit and copy.pending == copy.edit.output[1:] else 1.0)
            copy = (copy._replace(token=copy.pending[0], pending=copy.pending[1:]) if copy.pending
                    else self._copy_at(copy.resume, copy.agree, copy.near))
        if first is None or not tokens:
            return Draft((), source=self.name)
        seq = (*self._tokens[-2:], *tokens[:-1])
        after = list(zip(seq, seq[1:], strict=False))  # the two tokens before each drafted one
        return Draft(tuple(tokens), source=self.name, match_len=first.agree,
                     survival=self.odds.survival(first.agree, trust, after, first.near and not self._shaped()))

    def reset(self) -> None:
        """Forget the history, the remembered text and the learned edits."""
        self._reindex([])
        self.edits.clear()

    # -- the index -----------------------------------------------------------------------

    def _reindex(self, memory: list[int]) -> None:
        """Start over with ``memory`` as the remembered text and no history."""
        self._tokens, self._index, self._mem_len, self._age, self._forced = [], {}, 0, 0, set()
        self._last_forced = -1
        self._reply_from = self._next = self._anchor = self._broke = None
        self._append(memory)
        self._mem_len = len(memory)

    def _sync(self, history: Sequence[int], forced: int = 0) -> None:
        """Bring the index up to ``history`` (its last ``forced`` tokens forced), which within a
        reply only grows (one shorter, or whose last indexed token changed, is indexed again;
        ``begin`` compares the whole prompt)."""
        old = len(self._tokens) - self._mem_len
        if len(history) < old or (old and int(history[old - 1]) != self._tokens[-1]):
            self._reindex(self._tokens[:self._mem_len])
            old = 0
        self._append([int(t) for t in history[old:]], forced)

    def _append(self, new: list[int], forced: int = 0) -> None:
        toks, last = self._tokens, len(self._tokens) + len(new)
        for tok in new:
            e = len(toks)  # the n-grams ending before ``tok`` become matchable with it
            free = e < last - forced
            if not free:
                self._forced.add(e)
                self._last_forced = e
            elif self._control(tok):
                self._forced.add(e)
            prev = self._next
            hit = prev is not None and prev.token == tok
            scoring = self._reply_from is not None and e >= self._reply_from
            if scoring and prev is not None and free:
                self.odds.observe(prev.agree, hit, (toks[-2], toks[-1]) if self._age == 0 else None)
            for n in self.sizes:
                if n <= e:
                    self._index[tuple(toks[e - n:e])] = e - n
            toks.append(tok)
            if scoring or e + 1 == last:
                self._next = self._predict(prev if scoring else None, hit, free)

    # -- predicting ----------------------------------------------------------------------

    def _predict(self, prev: _Copy | None, hit: bool, free: bool = True) -> _Copy | None:
        """The prediction after the history's last token, given the one before and its outcome
        (``free``: the token was not forced, so a hit adds to the agreement)."""
        if prev is not None and hit:  # the copy goes on (through the rest of an edit it makes)
            if self._broke is not None and prev.near:
                self._learn_edit(self._broke, prev)
            self._broke, self._anchor, self._age = None, prev.resume, 0
            if prev.pending:
                return prev._replace(token=prev.pending[0], pending=prev.pending[1:], agree=prev.agree + free)
            if prev.edit is not None:
                prev.edit.rule.held += 1
            nxt = self._copy_at(prev.resume, prev.agree + free, prev.near)
            if nxt is not None:
                return nxt
        elif prev is not None:  # it broke off: note where, in its source and in the reply
            if prev.edit is not None:
                prev.edit.rule.failed += 1
            copying = self._anchor is not None and self._age == 0  # the prediction before held
            if self._anchor is None or self._age > self.tuning.edit_span:
                self._anchor, self._age, self._broke = prev.at, 0, None
            if copying and (prev.edit is None or prev.pending == prev.edit.output[1:]):
                self._broke = (prev.at, len(self._tokens) - 1)
        self._age += 1
        if self._anchor is not None and self._age <= self.tuning.edit_span:
            return self._near_anchor(self._anchor) or self._latest()
        return self._latest()

    def _learn_edit(self, broke: tuple[int, int], prev: _Copy) -> None:
        """The copy broke off at ``broke`` and resumed with ``prev``: the reply replaced the
        source between the two (up to where they agree again) by what it wrote in between."""
        toks = self._tokens
        (src, out), src_end, out_end = broke, prev.at, len(toks) - 1
        while src_end > src and out_end > out and toks[src_end - 1] == toks[out_end - 1]:
            src_end, out_end = src_end - 1, out_end - 1
        self.edits.learn(toks, src, out, src_end, out_end)

    def _copy_at(self, pos: int, agree: int, near: bool) -> _Copy | None:
        """The prediction that the copy goes on with the source at ``pos`` (edited as learned)."""
        toks = self._tokens
        edit = self.edits.at(toks, pos) if pos < len(toks) else None
        if edit is None:
            return _Copy(toks[pos], pos, pos + 1, agree, near) if pos < len(toks) else None
        resume = pos + len(edit.source)
        if edit.output:
            return _Copy(edit.output[0], pos, resume, agree, near, edit.output[1:], edit)
        return _Copy(toks[resume], pos, resume + 1, agree, near, (), edit) if resume < len(toks) else None

    def _near_anchor(self, anchor: int) -> _Copy | None:
        """The position within ``edit_span`` after the anchor whose preceding text agrees
        longest with the end of the history (one token at least), the nearest on ties."""
        best, best_agree = None, 0
        for src in range(anchor, min(anchor + self.tuning.edit_span, len(self._tokens) - 1) + 1):
            agree = self._agreement(src)
            if agree > best_agree and (src > self._mem_len or self._reply_agrees(agree)):
                best, best_agree = src, agree
        return self._copy_at(best, best_agree, True) if best is not None else None

    def _latest(self) -> _Copy | None:
        """The continuation of the latest earlier occurrence of the longest suffix n-gram."""
        toks = self._tokens
        for n in self.sizes:
            start = self._index.get(tuple(toks[len(toks) - n:])) if n < len(toks) else None
            agree = self._agreement(start + n) if start is not None else 0
            if start is not None and (start + n > self._mem_len or self._reply_agrees(agree)):
                return self._copy_at(start + n, agree, False)
        return None

    def _reply_agrees(self, agree: int) -> bool:
        """Whether ``agree`` tokens of agreement with remembered text, counting only the reply's
        own, are enough to draft from it."""
        own = len(self._tokens) - self._reply_from if self._reply_from is not None else 0
        return min(agree, own) >= self.tuning.agree_cap

    def _shaped(self) -> bool:
        """Whether a grammar forced tokens in the reply being written."""
        return self._reply_from is not None and self._last_forced >= self._reply_from

    def _agreement(self, src: int) -> int:
        """How many of the ``agree_cap`` tokens before ``src`` equal the end of the history (in a
        run of equal ones, not counting those a grammar forced nor control tokens)."""
        toks, n, i = self._tokens, len(self._tokens), 0
        while i < self.tuning.agree_cap and src > i and toks[src - i - 1] == toks[n - i - 1]:
            i += 1
        return i - sum(n - j - 1 in self._forced for j in range(i)) if self._forced else i
