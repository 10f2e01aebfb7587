"""From chat messages to prompt tokens that fit the context.

Markup only where the template put it: the template is rendered with a placeholder for each
message's text (engine.chat.messages.render_segments); the template's own text is tokenized with special
tokens parsed, every message's text without, so nothing a user types, pastes or opens can
become a control token such as ``<|im_start|>``.

Long conversations stay cheap: fit_messages renders once, tokenizes from the newest message back
only as far as the context reaches, and renders the kept suffix once more to check it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from engine.chat.messages import Message, Segment, render_segments
from engine.errors import DecodeError, MessageTooLongError
from engine.llama.model import Model
from engine.vision.prompt import image_tokens

log = logging.getLogger(__name__)


def _special_strings(model: Model) -> tuple[str, str]:
    bos = model.token_text(model.bos).decode("utf-8", "replace") if model.bos >= 0 else ""
    eos = model.token_text(model.eos).decode("utf-8", "replace") if model.eos >= 0 else ""
    return bos, eos


def chat_tokens(model: Model, messages: Sequence[Message], *, template: str | None = None,
                tools: Sequence[Any] = (), add_generation_prompt: bool = True,
                cancel: threading.Event | None = None,
                variables: Mapping[str, Any] | None = None) -> list[int]:
    """Render ``messages`` with the model's template and tokenize (message text never parsed for
    special tokens), adding BOS only where the model wants it and the template did not write it.
    ``variables``: more that the template gets (``enable_thinking``)."""
    bos, eos = _special_strings(model)
    segments = render_segments(messages, template if template is not None else model.chat_template,
                               tools=tools, inert=model.inert, bos_token=bos, eos_token=eos,
                               add_generation_prompt=add_generation_prompt, cancel=cancel,
                               variables=variables)
    parts = []
    for seg in segments:
        if cancel is not None and cancel.is_set():
            raise DecodeError("cancelled")
        parts.append(_tokens(model, seg, messages))
    return _joined(model, parts)


def _joined(model: Model, parts: Sequence[list[int]]) -> list[int]:
    """The segments' tokens in order, with BOS first where the model wants it and the template
    did not write it."""
    tokens = [t for part in parts for t in part]
    if model.add_bos and model.bos >= 0 and (not tokens or tokens[0] != model.bos):
        tokens.insert(0, model.bos)
    return tokens


def fit_messages(model: Model, messages: Sequence[Message], budget: int, *,
                 template: str | None = None, tools: Sequence[Any] = (),
                 cancel: threading.Event | None = None,
                 variables: Mapping[str, Any] | None = None) -> tuple[list[int], int]:
    """Tokens of the longest suffix of the conversation that fits ``budget`` tokens.

    The system message (if first) is always kept; the oldest other turns are dropped first.
    Returns (tokens, number of messages dropped). Raises MessageTooLongError when even the system
    message plus the last message do not fit, DecodeError("cancelled") when ``cancel`` is set.

    One render of the whole conversation; its segments are tokenized from the newest back and
    only until the budget is spent (a text too long to fit is not tokenized at all), so the work
    per turn grows with the context, not with the conversation. When all of it fits, those are
    the tokens; else one more render of the kept suffix checks the result (the template may add
    text around the new first turn).
    """
    msgs = list(messages)
    n_system = 1 if msgs and msgs[0].role == "system" else 0
    bos, eos = _special_strings(model)
    segments = render_segments(msgs, template if template is not None else model.chat_template,
                               tools=tools, inert=model.inert, bos_token=bos, eos_token=eos,
                               cancel=cancel, variables=variables)
    head = 0  # segments up to the system message's text are always kept
    if n_system:
        head = next((i + 1 for i, seg in enumerate(segments) if seg.message == 0), 0)
    kept = [_tokenize(model, seg, msgs, budget, cancel) for seg in segments[:head]]
    parts: list[list[int]] = []
    used, oldest = sum(map(len, kept)) + 1, len(msgs)
    for seg in reversed(segments[head:]):
        part = _tokenize(model, seg, msgs, budget, cancel)
        used += len(part)
        if seg.message is not None:
            oldest = seg.message
        if used > budget:
            break
        parts.append(part)
    else:  # everything fits: these are chat_tokens' tokens (a stand-in never fits a budget)
        if used <= budget:
            return _joined(model, kept + parts[::-1]), 0
        return chat_tokens(model, msgs, template=template, tools=tools, cancel=cancel,
                           variables=variables), 0  # (a system message alone, too long)
    dropped = max(oldest + 1 - n_system, 0)
    rest = len(msgs) - n_system
    while True:
        if dropped >= rest:
            raise MessageTooLongError(budget)
        tokens = chat_tokens(model, msgs[:n_system] + msgs[n_system + dropped:],
                             template=template, tools=tools, cancel=cancel, variables=variables)
        if len(tokens) <= budget:
            break
        dropped += 1
    if dropped:
        log.info("dropped the %d oldest messages to fit the context", dropped)
    return tokens, dropped


def _tokenize(model: Model, seg: Segment, messages: Sequence[Message], budget: int,
              cancel: threading.Event | None) -> list[int]:
    """The segment's tokens; for a message text that cannot fit ``budget`` tokens whatever its
    tokenization (more bytes than budget × the longest token), a stand-in of budget + 1."""
    if cancel is not None and cancel.is_set():
        raise DecodeError("cancelled")
    if seg.message is not None and len(seg.text) > budget + 1 and \
            len(seg.text) > (budget + 1) * _max_token_bytes(model):
        return [0] * (budget + 1)
    return _tokens(model, seg, messages)


def _tokens(model: Model, seg: Segment, messages: Sequence[Message]) -> list[int]:
    """Markup with its special tokens; anything written by someone, never a special token; a
    user's text after the message's pictures (engine.vision.prompt)."""
    if seg.markup:
        return model.tokenize(seg.text, add_special=False, parse_special=True)
    text = model.tokenize_text(seg.text) if seg.text else []
    message = messages[seg.message] if seg.message is not None else None
    if message is not None and message.images and message.role == "user":
        return image_tokens(model, message.images) + text
    return text


def _max_token_bytes(model: Model) -> int:
    """An upper bound of the bytes one token stands for (its vocabulary text is never shorter)."""
    cached = getattr(model, "_duet_max_token_bytes", None)
    if cached is None:
        cached = max((len(model.token_text(t)) for t in range(model.n_vocab)), default=1)
        model._duet_max_token_bytes = cached  # type: ignore[attr-defined]
    return cached
