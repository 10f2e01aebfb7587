"""How much of the context a conversation takes: its messages as the model reads them (the chat
template's rendering, with the attached files' text; a base model's one text to continue),
counted in the model's tokens. What the window's status bar shows for a conversation before its
next reply, when the engine holds no figure of its own (another conversation was answered since,
another model was loaded, the file was read without its KV state). A reply's own figure comes
from the context itself (the tokens it holds), a few tokens apart: the reply's end of turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.llama.model import Model
from engine.prompts.completion import completion_text


def context_use(model: Model, messages: Sequence[Message], n_ctx: int) -> int:
    """Tokens ``messages`` take in a context of ``n_ctx`` (at most all of it). Raises
    DuetError (a template that fails) or UnicodeError."""
    if not messages:
        return 0
    if model.chat_template is None:
        return min(len(model.tokenize_text(completion_text(messages))), n_ctx)
    if any(m.attachments for m in messages):
        # lazy: the readers and the passage index load only when a message carries files
        from engine.prompts.attachments import expand

        messages = expand(messages, n_ctx, lambda text: len(model.tokenize_text(text)))[0]
    return min(len(chat_tokens(model, messages, add_generation_prompt=False)), n_ctx)
