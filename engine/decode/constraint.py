"""Constrained decoding: a reply that follows a grammar (a JSON schema, GBNF or Lark), through
llguidance.

Why llguidance rather than xgrammar (measured here on the 151,936-token Qwen vocabulary, one
core): both compute a next-token mask well under 1% of a decode step of the 1.5B (median 16 µs,
p99 176 µs for a JSON schema; llguidance's whole work per token on the structured bench's
extraction, scripts/mask_cost.py and docs/benchmarks/structured.md: median 44-82 µs, about
0.1% of a step), but xgrammar needs torch and
transformers (gigabytes) and took 14 s to over 60 s to compile some hostile schemas that
llguidance refuses or compiles in milliseconds; llguidance's regular expressions run on a
derivative-based engine (no backtracking) with a per-mask fuel cap, it checks a draft without
committing it, its forced tokens are the only ones the mask allows, and it reads llama.cpp's own
GBNF grammars (xgrammar rejects json.gbnf).

``Grammar.compile`` checks a grammar up front (bounded: schema size, depth, alternatives, and
llguidance's own limits) and raises ``GrammarError`` with one line. ``Grammar.matcher`` gives a
fresh ``Matcher`` per reply: what the sampler (engine.decode.sampling.Constraint) and the loop need —
which tokens are allowed, the tokens the grammar forces next, how much of a draft it allows.
A matcher is used by one thread at a time.
"""

from __future__ import annotations

import ctypes
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from engine.errors import DuetError
from engine.llama.backend import lib
from engine.llama.model import Model

Kind = Literal["json_schema", "gbnf", "lark"]

MAX_SOURCE = 256 << 10  # bytes of schema or grammar text
MAX_DEPTH = 32  # nesting of a JSON schema's objects and arrays
MAX_ALTERNATIVES = 1024  # anyOf/oneOf branches and enum values, summed over the schema
# llguidance's own bounds on work: compiling (lexer fuel, grammar size) and each mask (fuel,
# Earley items); a grammar past them is refused, a mask past them ends the reply.
_LIMITS = dict(initial_lexer_fuel=1_000_000, step_lexer_fuel=200_000, step_max_items=50_000,
               max_grammar_size=500_000, verbose_errors=False)

# JSON as models write it (and Python's json.dumps): one line, ", " and ": ". Fixed separators
# let the grammar force them (with the keys) instead of leaving every space to a decision.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

_tokenizers: dict[int, Any] = {}  # id(model) -> its LLTokenizer (dropped with the model)
_pieces: dict[int, list[bytes]] = {}  # id(model) -> its tokens' bytes so far (``prepare``)
_tokenizers_lock = threading.Lock()
PREPARE_STEP = 8192  # tokens of the vocabulary per idle step (about 30 ms here)
# Before llguidance's own build (0.6 s on Qwen's vocabulary, which nothing can stop and which
# holds the GIL), the process must have been quiet this long: requests come in bursts (a client
# turns a reply into its next request within a fraction of a second), and a second model's
# request right after the first model's reply met that build (bench fleet: its first token
# 0.84-1.04 s when it came 4 s later, 1.08-1.14 s when it came at once; docs/benchmarks/models.md).
BUILD_CALM_S = 1.0


class GrammarError(DuetError):
    """A grammar or schema that cannot be used; the message says why in one line."""


def _llg() -> Any:
    # lazy: llguidance (a native library, 7-10 ms) only when a grammar is compiled, not with
    # every Runtime (the request path imports this module) nor at duet-cli's or the window's start
    import llguidance

    return llguidance


def tokenizer(model: Model) -> Any:
    """llguidance's view of ``model``'s vocabulary, built once per model (about a second on
    Qwen's 151,936 tokens: 0.6 s of it llguidance's own build, which holds the GIL)."""
    with _tokenizers_lock:
        tok = _tokenizers.get(id(model))
        if tok is None:
            tokens = _pieces.pop(id(model), [])
            tokens += _token_bytes(model, len(tokens), model.n_vocab)
            tok = _llg().LLTokenizer.from_llamacpp(
                tokens=tokens, vocab_ptr=model.vocab, tokenize_fptr=_TOKENIZE,
                eos_token=sorted(model.eog_ids), slices=None)
            _tokenizers[id(model)] = tok
            model.on_close(lambda: _tokenizers.pop(id(model), None))
        return tok


def prepare(model: Model, stop: threading.Event | None = None) -> bool:
    """Build ``model``'s vocabulary for llguidance as idle work of the engine's thread
    (engine.runtime.service.Engine.add_idle), so that the first request with a schema or a forced
    tool call does not wait for it: ``PREPARE_STEP`` tokens' bytes a call, so that a request
    arriving meanwhile waits for one step (30 ms), not for the whole (it waited 1.3 s on the
    0.5B), then llguidance's build, once ``stop`` (the engine's preempt: set by any request or
    load in the process) has stayed clear for ``BUILD_CALM_S``. True while there is more to do."""
    with _tokenizers_lock:
        if id(model) in _tokenizers:
            return False
        if id(model) not in _pieces:
            _pieces[id(model)] = []
            model.on_close(lambda: _pieces.pop(id(model), None))
        done = _pieces[id(model)]
        if len(done) < model.n_vocab:
            done += _token_bytes(model, len(done), min(len(done) + PREPARE_STEP, model.n_vocab))
            return True
    if stop is not None and stop.wait(BUILD_CALM_S):
        return True  # something arrived: build once it has been quiet again
    tokenizer(model)
    return False


def is_prepared(model: Model) -> bool:
    with _tokenizers_lock:
        return id(model) in _tokenizers


def _token_bytes(model: Model, start: int, end: int) -> list[bytes]:
    """Tokens' bytes as llguidance reads them: control tokens (and user-defined ones that look
    like ``<...>``) prefixed with 0xff, so that no text can spell them. One buffer for all (a
    buffer per token took a third of the time)."""
    buf = ctypes.create_string_buffer(256)
    to_piece, get_attr, vocab = lib.llama_token_to_piece, lib.llama_vocab_get_attr, model.vocab
    control, user = lib.LLAMA_TOKEN_ATTR_CONTROL, lib.LLAMA_TOKEN_ATTR_USER_DEFINED
    out = []
    for t in range(start, end):
        n = to_piece(vocab, t, buf, 256, 0, True)
        text = ctypes.string_at(buf, n) if n >= 0 else model.special_piece(t)
        attr = get_attr(vocab, t)
        if attr & control or (attr & user and text.startswith(b"<") and text.endswith(b">")):
            text = b"\xff" + text
        out.append(text)
    return out


_TOKENIZE = ctypes.cast(lib.llama_tokenize, ctypes.c_void_p).value


@dataclass(frozen=True)
class Grammar:
    """A checked grammar in llguidance's form, ready to make matchers for one model."""

    source: str  # llguidance's grammar (JSON or Lark text)
    model: Model

    @classmethod
    def compile(cls, model: Model, kind: Kind, text: str | dict[str, Any]) -> Grammar:
        """Check and convert a grammar; GrammarError (one line) when it cannot be used."""
        llg = _llg()
        try:
            if kind == "json_schema":
                schema = json.loads(text) if isinstance(text, str) else text
                check_schema(schema)
                source = llg.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_STYLE)
            elif kind == "gbnf":
                _check_size(str(text))
                source = llg.grammar_from("gbnf", str(text))
            else:
                _check_size(str(text))
                source = llg.LLMatcher.grammar_from_lark(str(text))
        except GrammarError:
            raise
        except (ValueError, TypeError, RecursionError) as e:
            raise GrammarError(f"the {_NAMES[kind]} cannot be used: {_line(e)}") from None
        is_err, messages = llg.LLMatcher.validate_grammar_with_warnings(
            source, tokenizer(model), limits=llg.LLParserLimits(**_LIMITS))
        if is_err:
            raise GrammarError(f"the {_NAMES[kind]} cannot be used: {_line(messages)}")
        return cls(source, model)

    def matcher(self) -> Matcher:
        llg = _llg()
        m = llg.LLMatcher(tokenizer(self.model), self.source, log_level=0,
                          limits=llg.LLParserLimits(**_LIMITS))
        if m.is_error():
            raise GrammarError(f"the grammar cannot be used: {_line(m.get_error())}")
        return Matcher(m, self.model)


_NAMES = {"json_schema": "JSON schema", "gbnf": "grammar", "lark": "grammar"}


class Matcher:
    """The grammar's state in one reply: advanced by every emitted token."""

    def __init__(self, m: Any, model: Model) -> None:
        from llguidance import numpy as llg_numpy  # lazy: as _llg (a matcher follows a compile)

        self._m = m
        self._eog = model.eog_ids
        self._n_vocab = model.n_vocab
        self._bits = llg_numpy.allocate_token_bitmask(1, model.n_vocab)
        self._fill = llg_numpy.fill_next_token_bitmask

    @property
    def done(self) -> bool:
        """The grammar is complete and allows nothing more (the reply ends here)."""
        return bool(self._m.is_stopped())

    @property
    def accepting(self) -> bool:
        """The text so far is complete under the grammar (it may end here)."""
        return bool(self._m.is_accepting())

    @property
    def failed(self) -> str | None:
        """Why the grammar can no longer go on (a mask past its limits), or None."""
        return _line(self._m.get_error()) if self._m.is_error() else None

    def allows(self, token: int) -> bool:
        if token in self._eog:
            return bool(self._m.is_accepting())
        return not self._m.is_stopped() and self._m.validate_tokens([token]) == 1

    def mask(self) -> np.ndarray:
        """Which tokens may come next: bool (n_vocab,)."""
        self._fill(self._m, self._bits)
        return np.unpackbits(self._bits[0].view(np.uint8), bitorder="little",
                             count=self._n_vocab).view(bool)

    def advance(self, token: int) -> None:
        """Take an emitted token (one the grammar allows; the end of the reply is not taken)."""
        if token not in self._eog:
            self._m.consume_token(token)

    def forced(self) -> list[int]:
        """The tokens the grammar allows and nothing else, in order, from here: llguidance's
        fast-forward tokens, each kept while the mask at its place allows it alone (whatever the
        logits, the sampler picks it: a pass needs no logits for them)."""
        if self._m.is_stopped():
            return []
        kept = []
        for token in self._m.compute_ff_tokens():
            self._fill(self._m, self._bits)
            words = self._bits[0].view(np.uint32)
            hit = np.flatnonzero(words)
            if len(hit) != 1 or hit[0] != token >> 5 or int(words[hit[0]]) != 1 << (token & 31):
                break
            self._m.consume_token(token)
            kept.append(token)
        if kept:
            self._m.rollback(len(kept))
        return kept

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` the grammar allows in a row from here (nothing is taken)."""
        if not tokens or self._m.is_stopped():
            return 0
        return int(self._m.validate_tokens(list(tokens)))


# -- bounds on a schema, checked before llguidance sees it ------------------------------------
def _check_size(text: str) -> None:
    if len(text.encode("utf-8", "replace")) > MAX_SOURCE:
        raise GrammarError(f"the grammar is larger than {MAX_SOURCE >> 10} KiB")


def check_schema(schema: Any) -> None:
    """Refuse a JSON schema that is not an object or boolean, or is too large, too deep or has
    too many alternatives (GrammarError, one line)."""
    if not isinstance(schema, (dict, bool)):
        raise GrammarError("a JSON schema must be an object")
    _check_size(json.dumps(schema))
    alternatives = 0
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise GrammarError(f"the JSON schema is nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            for key in ("anyOf", "oneOf", "enum"):
                if isinstance(node.get(key), list):
                    alternatives += len(node[key])
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, depth) for v in node if isinstance(v, (dict, list)))
        if alternatives > MAX_ALTERNATIVES:
            raise GrammarError(f"the JSON schema has more than {MAX_ALTERNATIVES} alternatives "
                               "(anyOf, oneOf and enum values together)")


def _line(e: object) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."
