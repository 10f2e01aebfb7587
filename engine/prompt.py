"""From chat messages to prompt tokens that fit the context."""

from __future__ import annotations

import logging
from typing import Sequence

from engine.chat import Message, render
from engine.errors import ContextFullError
from engine.model import Model

log = logging.getLogger(__name__)


def chat_tokens(model: Model, messages: Sequence[Message], *, template: str | None = None,
                add_generation_prompt: bool = True) -> list[int]:
    """Render ``messages`` with the model's template and tokenize, adding BOS only where the model
    wants it and the template did not already write it."""
    bos = model.token_text(model.bos).decode("utf-8", "replace") if model.bos >= 0 else ""
    eos = model.token_text(model.eos).decode("utf-8", "replace") if model.eos >= 0 else ""
    text = render(messages, template if template is not None else model.chat_template,
                  bos_token=bos, eos_token=eos, add_generation_prompt=add_generation_prompt)
    tokens = model.tokenize(text, add_special=False, parse_special=True)
    if model.add_bos and model.bos >= 0 and (not tokens or tokens[0] != model.bos):
        tokens.insert(0, model.bos)
    return tokens


def fit_messages(model: Model, messages: Sequence[Message], budget: int, *,
                 template: str | None = None) -> tuple[list[int], int]:
    """Tokens of the longest suffix of the conversation that fits ``budget`` tokens.

    The system message (if first) is always kept; the oldest other turns are dropped first.
    Returns (tokens, number of messages dropped). Raises ContextFullError when even the system
    message plus the last message do not fit.
    """
    msgs = list(messages)
    system = msgs[:1] if msgs and msgs[0].role == "system" else []
    rest = msgs[len(system):]
    for dropped in range(len(rest)):
        tokens = chat_tokens(model, system + rest[dropped:], template=template)
        if len(tokens) <= budget:
            if dropped:
                log.info("dropped the %d oldest messages to fit the context", dropped)
            return tokens, dropped
    n = len(chat_tokens(model, system + rest[-1:], template=template)) if rest else 0
    raise ContextFullError(
        f"the message is too long for the context ({n} tokens, room for {budget})")
