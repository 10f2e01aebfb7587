"""One chat request in Duet's own terms, whatever dialect it came in (OpenAI, Anthropic,
Ollama): ``Chat`` is what the client asked; ``prepare`` checks it and turns it into a ``Turn``
(the prompt, the grammar the reply must follow, how to read tool calls back); ``pieces`` runs a
turn on the engine and yields its reply as text, tool calls and the end, for the dialect to
shape. Every refusal is an ApiError (400) with one line naming the field."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Literal

from engine import params
from engine.chat import Message
from engine.constraint import Grammar, GrammarError, check_schema
from engine.errors import DuetError
from engine.events import Done, Token
from engine.params import Params, param
from engine.sampling import SamplingParams
from engine.server.errors import bad_request
from engine.tools import NAME, Tool, ToolChoice
from engine.tools.formats import Format
from engine.tools.lazy import LazyGrammar
from engine.tools.prompting import call_grammar, tool_prompt
from engine.tools.scanner import Scanner

FINISH = {"stop": "stop", "length": "length", "context_full": "length", "cancelled": "stop"}
MAX_TOOLS = 128


@dataclass(frozen=True)
class ReplyParams(Params):
    """What a reply reports besides its text (rows of the parameter table)."""

    logprobs: bool = param(False, "Log-probabilities", "Return each token's log-probability.",
                           api={"openai": ("logprobs",), "ollama": ("logprobs",)}, cli=None)
    top_logprobs: int = param(0, "Top log-probabilities", "How many of the most likely tokens "
                              "to return at each position, with their log-probabilities.",
                              minimum=0, maximum=20, api={"openai": ("top_logprobs",),
                                                          "ollama": ("top_logprobs",),
                                                          "responses": ("top_logprobs",)},
                              cli=None)


@dataclass(frozen=True)
class Chat:
    """A chat request. ``response``: the grammar the reply must follow, as (kind, source);
    ``logprobs``: None, or how many alternatives to report with each token's log-probability."""

    messages: tuple[Message, ...]
    sampling: SamplingParams
    tools: tuple[Tool, ...] = ()
    choice: ToolChoice = field(default_factory=ToolChoice)
    response: tuple[Literal["json_schema", "gbnf", "lark"], Any] | None = None
    logprobs: int | None = None
    param_names: dict[str, str] = field(default_factory=dict)  # Duet's name -> the dialect's


@dataclass
class Turn:
    prompt: list[int]
    sampling: SamplingParams
    grammar: Grammar | LazyGrammar | None
    logprobs: int | None
    fmt: Format | None  # how tool calls are read back (None: no tools, all text)
    names: tuple[str, ...] = ()


def prepare(model: Any, chat: Chat) -> Turn:
    """Check ``chat`` against the model and build its turn (tokenizes and compiles grammars:
    run it off the event loop)."""
    names = chat.param_names
    tools = _check_tools(chat, names)
    _check_tool_messages(chat.messages, names.get("messages", "messages"))
    try:
        prompt, fmt = tool_prompt(model, chat.messages, tools)
    except DuetError as e:
        raise bad_request(str(e), names.get("messages", "messages")) from None
    except UnicodeError:
        raise bad_request("the messages are not valid Unicode text",
                          names.get("messages", "messages")) from None
    grammar: Grammar | LazyGrammar | None = None
    try:
        if chat.response is not None:
            grammar = Grammar.compile(model, *chat.response)
        else:
            grammar = call_grammar(model, fmt, tools, chat.choice)
    except GrammarError as e:
        field_name = "response_format" if chat.response is not None else "tools"
        shown = names.get(field_name, field_name)
        raise bad_request(f"{shown}: {e}", shown, "invalid_grammar") from None
    return Turn(prompt, chat.sampling, grammar, chat.logprobs, fmt if tools else None,
                tuple(t.name for t in tools))


def _check_tools(chat: Chat, names: dict[str, str]) -> list[Tool]:
    """The tools offered to the model (none under tool_choice none), checked."""
    where, choice_field = names.get("tools", "tools"), names.get("tool_choice", "tool_choice")
    if len(chat.tools) > MAX_TOOLS:
        raise bad_request(f"{where}: at most {MAX_TOOLS} tools", where)
    seen: set[str] = set()
    for i, t in enumerate(chat.tools):
        if not NAME.match(t.name):
            raise bad_request(f"{where}[{i}]: a function name is 1 to 64 letters, digits, _ or -",
                              f"{where}.{i}")
        if t.name in seen:
            raise bad_request(f"{where}[{i}]: the function {t.name!r} is given twice", f"{where}.{i}")
        seen.add(t.name)
        try:
            check_schema(t.parameters)
        except GrammarError as e:
            raise bad_request(f"{where}[{i}]: {e}", f"{where}.{i}") from None
    c = chat.choice
    if c.mode in ("required", "function") and chat.response is not None:
        raise bad_request(f"{choice_field} {c.mode} and a response format cannot be combined",
                          choice_field)
    if c.mode in ("required", "function") and not chat.tools:
        raise bad_request(f"{choice_field} {c.mode} needs tools", choice_field)
    if c.mode == "function" and c.name not in seen:
        raise bad_request(f"{choice_field}: no tool is named {c.name!r}", choice_field)
    return [] if c.mode == "none" else list(chat.tools)


def _check_tool_messages(messages: tuple[Message, ...], where: str) -> None:
    """A tool result must answer a call made before it."""
    ids: set[str] = set()
    for i, m in enumerate(messages):
        ids.update(c.id for c in m.tool_calls)
        if m.role == "tool" and m.tool_call_id not in ids:
            raise bad_request(f"{where}[{i}]: the tool result's id {m.tool_call_id!r} answers no "
                              "call made before it", f"{where}.{i}")


def sampling(data: dict[str, Any], dialect: str, defaults: SamplingParams) -> SamplingParams:
    try:
        return params.read(SamplingParams, data, dialect, defaults)
    except params.ParamError as e:
        raise bad_request(str(e), e.api_name) from None


def reply_params(data: dict[str, Any], dialect: str) -> ReplyParams:
    try:
        return params.read(ReplyParams, data, dialect, ReplyParams())
    except params.ParamError as e:
        raise bad_request(str(e), e.api_name) from None


# -- the reply, as pieces -----------------------------------------------------------------
@dataclass(frozen=True)
class Text:
    text: str
    tokens: tuple[Token, ...] = ()  # the tokens whose log-probabilities came with this piece


@dataclass(frozen=True)
class Call:
    call: Any  # engine.chat.ToolCall


@dataclass(frozen=True)
class End:
    done: Done
    finish: str  # stop, length or tool_calls


Piece = Text | Call | End


async def pieces(items: AsyncIterator[object], turn: Turn) -> AsyncIterator[Piece]:
    """The engine's events for ``turn`` as text, calls and the end (tool calls read back with
    the turn's format)."""
    scanner = Scanner(turn.fmt, turn.names) if turn.fmt is not None else None
    async for item in items:
        if isinstance(item, Token):
            tokens = (item,) if item.logprob is not None else ()
            if scanner is None:
                if item.text or tokens:
                    yield Text(item.text, tokens)
                continue
            out = scanner.feed(item.text)
            for x in out:
                yield Text(x, tokens) if isinstance(x, str) else Call(x)
                tokens = () if isinstance(x, str) else tokens
            if tokens:
                yield Text("", tokens)
        elif isinstance(item, Done):
            rest: list[Any] = []
            if scanner is not None:
                rest = scanner.feed(item.tail) + scanner.close()
            elif item.tail:
                rest = [item.tail]
            for x in rest:
                yield Text(x) if isinstance(x, str) else Call(x)
            made_calls = scanner is not None and scanner.made_calls
            yield End(item, "tool_calls" if made_calls and item.reason == "stop"
                      else FINISH[item.reason])
            return


async def collect(stream: AsyncIterator[Piece]) -> tuple[str, list[Any], list[Token], End]:
    """A whole reply: (text, calls, tokens with log-probabilities, end)."""
    text: list[str] = []
    calls: list[Any] = []
    tokens: list[Token] = []
    async for p in stream:
        if isinstance(p, Text):
            text.append(p.text)
            tokens.extend(p.tokens)
        elif isinstance(p, Call):
            calls.append(p.call)
        else:
            return "".join(text), calls, tokens, p
    raise asyncio.CancelledError  # the stream ended without its end: the server is stopping
