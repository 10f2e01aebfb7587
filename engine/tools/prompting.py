"""A chat with tools as a prompt: the model's own template when it renders tools, else the
fallback prompt (engine.tools.fallback); the format its calls are read back with; and the
grammar that forces a call (or, under auto, holds a call to its schema once it starts); and the
part of the next prompt known before a tool's result. The server's dialects and the tool rounds
of the CLI and the window build their prompts here."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from engine.cache.prefix import common_prefix
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message, ToolCall
from engine.decode.constraint import Grammar
from engine.llama.model import Model
from engine.tools import Tool, ToolChoice, fallback
from engine.tools.formats import GENERIC, Format, detect, grammar, renders_tools
from engine.tools.lazy import LazyGrammar, lazy_grammar


def tool_prompt(model: Model, messages: Sequence[Message], tools: Sequence[Tool], *,
                cancel: threading.Event | None = None,
                variables: Mapping[str, Any] | None = None) -> tuple[list[int], Format]:
    """(prompt tokens, the format calls are read with) for ``messages`` offering ``tools``
    (``variables``: more that the template gets, ``enable_thinking``). Raises DuetError (a
    template that fails) or UnicodeError (text that is not Unicode)."""
    template = model.chat_template
    msgs, specs, fmt = list(messages), [t.spec() for t in tools], detect(template)
    uses_tools = bool(tools) or any(m.tool_calls or m.role == "tool" for m in msgs)
    if uses_tools and not renders_tools(template):
        msgs, specs, fmt = fallback.messages(msgs, tools), [], GENERIC
    return chat_tokens(model, msgs, tools=specs, cancel=cancel, variables=variables), fmt


def call_grammar(model: Model, fmt: Format, tools: Sequence[Tool],
                 choice: ToolChoice) -> Grammar | LazyGrammar | None:
    """The grammar of a reply made only of calls, for ``required`` or a named function; under
    ``auto``, the same from where a call starts (engine.tools.lazy); None without tools.
    Raises GrammarError for a schema it cannot compile."""
    if not tools or choice.mode == "none":
        return None
    if choice.mode == "auto":
        return lazy_grammar(model, fmt, tools, choice.parallel)
    return Grammar.compile(model, "lark", grammar(fmt, model, tools, choice))


def result_prefix(model: Model, messages: Sequence[Message], tools: Sequence[Tool], call: ToolCall,
                  *, cancel: threading.Event | None = None) -> list[int]:
    """The tokens of the prompt after ``call``'s result that come before the result: those the
    prompts with two different results share (whatever the template puts around a result).
    ``messages`` end with the reply that made the call (and the results before this one)."""
    a, b = (tool_prompt(model, [*messages, Message("tool", text, tool_call_id=call.id, name=call.name)],
                        tools, cancel=cancel)[0] for text in ("0", "1"))
    return a[:common_prefix(a, b)]
