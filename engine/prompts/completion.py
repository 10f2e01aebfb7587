"""A conversation with a model that has no chat template (a base model: completion only), as the
window runs it: its messages are one text that the model continues, a raw prompt.

The person's messages and the model's replies are read top to bottom as written: a reply goes on
from the end of the message before it, and each later message starts a paragraph of its own.
System prompts are left out (a base model has no role to give them). The text is tokenized as
someone's writing (engine.llama.model.Model.tokenize_text: never a control token), and a text
longer than the room for a prompt keeps its end (the model continues the end).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.llama.model import Model
from engine.prompts.request import PreparedTurn, RequestError, reply_budget

PARAGRAPH = "\n\n"  # between a reply and the person's next message


def completion_text(messages: Sequence[Message], continue_text: str | None = None) -> str:
    """The text a base model continues: the user's and assistant's messages as written, each
    user message after the first a paragraph of its own; ``continue_text``: a reply so far."""
    parts: list[str] = []
    for m in messages:
        if m.role not in ("user", "assistant") or not m.content:
            continue
        if parts and m.role == "user":
            parts.append(PARAGRAPH)
        parts.append(m.content)
    if continue_text:
        parts.append(continue_text)
    return "".join(parts)


def completion_turn(model: Model, messages: Sequence[Message], sampling: SamplingParams,
                    n_ctx: int, continue_text: str | None = None) -> PreparedTurn:
    """The turn that continues ``messages`` (``completion_text``) within ``n_ctx``: the text's
    last tokens when it is longer than the room for a prompt (``reply_budget``)."""
    tokens = model.tokenize_text(completion_text(messages, continue_text))
    room = reply_budget(n_ctx) - 1  # (and BOS)
    tokens = tokens[-room:] if len(tokens) > room else tokens
    if model.add_bos and model.bos >= 0:
        tokens = [model.bos, *tokens]
    if not tokens:
        raise RequestError("there is no text to continue", "messages")
    max_tokens = min(sampling.max_tokens, n_ctx - len(tokens))
    return PreparedTurn(tokens, replace(sampling, max_tokens=max_tokens), None, None, None)
