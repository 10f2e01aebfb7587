"""The grammar of tool calls from where a call starts, under ``tool_choice`` auto.

Under ``auto`` the model answers in text or calls. Once it has written the start of a call that
names an offered function (its family's opener, a fenced JSON block at the start of a line or a
bare object opening the reply, then ``{"name": "<function>"``), the rest of the reply follows the
grammar of calls (engine.tools.formats.grammar): the arguments validate against the function's
schema, and the tokens the grammar forces are decoded without a choice. llama.cpp's lazy
grammars start on the same kind of pattern. Text before the call is free; a start the grammar
refuses stays text, and the reply stays free. Once the call is whole the reply is free again
(text, or another call, held in turn), unless only one call is allowed: then it ends there.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.decode.constraint import Grammar, Matcher
from engine.llama.model import Model
from engine.tools import Tool, ToolChoice
from engine.tools.formats import Format, grammar

_WS_MAX = 40  # a run of whitespace in a call's start, bounded as the grammar bounds it
_WS = rf"\s{{0,{_WS_MAX}}}"


@dataclass(frozen=True)
class LazyGrammar:
    """The grammar of calls and the pattern of a call's start (``window``: the longest text it
    can match, so the pattern is only looked for at the end of the reply)."""

    grammar: Grammar
    trigger: re.Pattern[str]
    window: int
    parallel: bool = True

    def matcher(self) -> LazyMatcher:
        return LazyMatcher(self)


def lazy_grammar(model: Model, fmt: Format, tools: Sequence[Tool], parallel: bool = True) -> LazyGrammar:
    """Raises GrammarError for a schema the grammar cannot take."""
    compiled = Grammar.compile(model, "lark", grammar(fmt, model, tools, ToolChoice("auto", parallel=parallel)))
    names = "|".join(re.escape(t.name) for t in tools)
    starts = [r"(?:^|(?<=\n))```json\n" + _WS, r"^" + _WS]
    if fmt.opener:
        starts.insert(0, re.escape(fmt.opener) + _WS + r"\[?" + _WS)
    trigger = re.compile("(?:" + "|".join(starts) + r")\{" + _WS + '"name"' + _WS + ":" + _WS
                         + '"(?:' + names + ')"')
    runs = 5  # the runs of whitespace the pattern allows
    window = len(fmt.opener) + len("```json\n") + runs * _WS_MAX + len('{"name":""[') + max(len(t.name) for t in tools)
    return LazyGrammar(compiled, trigger, window, parallel)


class LazyMatcher:
    """A reply's state of a ``LazyGrammar``: free (everything allowed) until a call starts,
    then the grammar's matcher (engine.decode.constraint.Matcher) fed the call's text so far."""

    def __init__(self, lazy: LazyGrammar) -> None:
        self._lazy, self._model = lazy, lazy.grammar.model
        self._active: Matcher | None = None
        self._text = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._from = 0  # where a call's start is looked for (past a start the grammar refused)
        self.held = 0  # calls the grammar took over
        self._all: np.ndarray | None = None  # the mask while free (a sampled reply asks for it)

    @property
    def active(self) -> bool:
        return self._active is not None

    @property
    def done(self) -> bool:
        return self._active is not None and self._active.done

    @property
    def failed(self) -> str | None:
        return self._active.failed if self._active is not None else None

    def allows(self, token: int) -> bool:
        return self._active is None or self._active.allows(token)

    def mask(self) -> np.ndarray:
        if self._active is not None:
            return self._active.mask()
        if self._all is None:
            self._all = np.ones(self._model.n_vocab, dtype=bool)
        return self._all

    def forced(self) -> list[int]:
        return self._active.forced() if self._active is not None else []

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """While free, a draft is not cut (the call's start, if it has one, is checked when the
        draft is verified: from there each token is picked under the grammar)."""
        return self._active.valid_prefix(tokens) if self._active is not None else len(tokens)

    def advance(self, token: int) -> None:
        if token in self._model.eog_ids:
            return
        self._text += self._decoder.decode(self._model.special_piece(token))
        if self._active is not None:
            self._active.advance(token)
            if self._lazy.parallel and self._active.accepting:  # the call is whole: free again
                self._active, self._from = None, len(self._text)
            return
        found = self._lazy.trigger.search(self._text, max(self._from, len(self._text) - self._lazy.window))
        if found is None:
            return
        self._from = len(self._text)
        call = self._text[found.start():].lstrip()
        matcher = self._lazy.grammar.matcher()
        tokens = self._model.tokenize(call, add_special=False, parse_special=True)
        if matcher.valid_prefix(tokens) == len(tokens):
            for t in tokens:
                matcher.advance(t)
            self._active, self.held = matcher, self.held + 1
