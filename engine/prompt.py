"""From chat messages to prompt tokens that fit the context.

Markup only where the template put it: the template is rendered with a placeholder for each
message's text (engine.chat.render_segments); the template's own text is tokenized with special
tokens parsed, every message's text without, so nothing a user types, pastes or opens can
become a control token such as ``<|im_start|>``.

Long conversations stay linear: each message is rendered and tokenized once per turn, the
oldest turns are dropped by their measured token counts, and one more render checks the result.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Sequence

from engine.chat import Message, render_segments
from engine.errors import ContextFullError, DecodeError
from engine.model import Model

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Measured:
    """Prompt tokens of a conversation, and each message's share of them (its text plus the
    template text before it); ``tail`` is the template text after the last message."""

    tokens: list[int]
    costs: list[int]
    tail: int


def _special_strings(model: Model) -> tuple[str, str]:
    bos = model.token_text(model.bos).decode("utf-8", "replace") if model.bos >= 0 else ""
    eos = model.token_text(model.eos).decode("utf-8", "replace") if model.eos >= 0 else ""
    return bos, eos


def _measure(model: Model, messages: Sequence[Message], template: str | None,
             add_generation_prompt: bool, cancel: threading.Event | None) -> _Measured:
    bos, eos = _special_strings(model)
    segments = render_segments(messages, template if template is not None else model.chat_template,
                               bos_token=bos, eos_token=eos,
                               add_generation_prompt=add_generation_prompt, cancel=cancel)
    tokens: list[int] = []
    costs = [0] * len(messages)
    pending = 0
    for seg in segments:
        if cancel is not None and cancel.is_set():
            raise DecodeError("cancelled")
        part = model.tokenize(seg.text, add_special=False, parse_special=seg.message is None)
        tokens += part
        if seg.message is None:
            pending += len(part)
        else:
            costs[seg.message] += pending + len(part)
            pending = 0
    if model.add_bos and model.bos >= 0 and (not tokens or tokens[0] != model.bos):
        tokens.insert(0, model.bos)
        pending += 1
    return _Measured(tokens, costs, pending)


def chat_tokens(model: Model, messages: Sequence[Message], *, template: str | None = None,
                add_generation_prompt: bool = True,
                cancel: threading.Event | None = None) -> list[int]:
    """Render ``messages`` with the model's template and tokenize (message text never parsed for
    special tokens), adding BOS only where the model wants it and the template did not write it."""
    return _measure(model, messages, template, add_generation_prompt, cancel).tokens


def fit_messages(model: Model, messages: Sequence[Message], budget: int, *,
                 template: str | None = None, cancel: threading.Event | None = None
                 ) -> tuple[list[int], int]:
    """Tokens of the longest suffix of the conversation that fits ``budget`` tokens.

    The system message (if first) is always kept; the oldest other turns are dropped first.
    Returns (tokens, number of messages dropped). Raises ContextFullError when even the system
    message plus the last message do not fit, DecodeError("cancelled") when ``cancel`` is set.
    """
    msgs = list(messages)
    n_system = 1 if msgs and msgs[0].role == "system" else 0
    whole = _measure(model, msgs, template, True, cancel)
    rest = len(msgs) - n_system
    tokens, dropped = whole.tokens, 0
    while len(tokens) > budget:
        if dropped >= rest - 1:
            raise ContextFullError(f"the message is too long for the context ({len(tokens)} "
                                   f"tokens, room for {budget})")
        excess, freed = len(tokens) - budget, 0
        while dropped < rest - 1 and freed < excess:  # by the counts measured once
            freed += whole.costs[n_system + dropped]
            dropped += 1
        # one render checks it (the template may add or drop text around the new first turn)
        tokens = chat_tokens(model, msgs[:n_system] + msgs[n_system + dropped:],
                             template=template, cancel=cancel)
    if dropped:
        log.info("dropped the %d oldest messages to fit the context", dropped)
    return tokens, dropped
