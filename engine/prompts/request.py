"""One chat request in the engine's terms, wherever it came from (the window, a server dialect,
the command line): ``Chat`` is what was asked; ``prepare`` checks it against the model and
turns it into a ``PreparedTurn`` (the prompt, the grammar the reply must follow, how tool calls are
read back, what was left out to fit); ``Reader`` turns the engine's events for a turn into the
reply's pieces (text, calls, the end). Every refusal is a ``RequestError`` with one line and the
field it names (the server answers 400 with it, the window shows it)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from engine.cache.prefix import common_prefix
from engine.chat.fit import chat_tokens, fit_messages
from engine.chat.messages import Message, ToolCall
from engine.chat.reasoning import Thinking, ThinkSpec, close_text, opens_section, thinks
from engine.chat.think_split import ThinkSplitter
from engine.decode.constraint import Grammar, GrammarError, check_schema
from engine.decode.sampling import SamplingParams
from engine.errors import DuetError
from engine.events import Done, Token
from engine.llama.model import Model
from engine.tools import NAME, Tool, ToolChoice
from engine.tools.formats import Format
from engine.tools.lazy import LazyGrammar
from engine.tools.prompting import call_grammar, tool_prompt
from engine.tools.scanner import Scanner
from engine.vision.images import ImageError

if TYPE_CHECKING:
    from engine.prompts.attachments import Embed, Source

FINISH = {"stop": "stop", "length": "length", "context_full": "length", "cancelled": "stop"}
MAX_TOOLS = 128

log = logging.getLogger(__name__)


class RequestError(DuetError):
    """A request the engine cannot run as asked: ``field`` names what is wrong (in the
    dialect's words where it gave them), ``code`` a machine-readable kind."""

    def __init__(self, message: str, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.field, self.code = field, code


def no_template_line(model: Model) -> str:
    """Why a model without a chat template is not chatted with: a base model continues text;
    a made-up template (ChatML) only makes it echo the markup (gemma-3-270m answered "Say
    hello." with ``Say hello.<|im_end``)."""
    return (f"{model.display_name} has no chat template: it is a base model (completion only); "
            "give it a raw prompt to continue (/v1/completions) instead of chat messages")


def reply_budget(n_ctx: int) -> int:
    """Prompt tokens a conversation may keep: the context less a quarter of it for the reply.

    The room depends on the context alone, never on a reply's max_tokens: then the oldest turn
    kept only moves forward as the conversation grows, and the cache (shifted past the turns
    dropped) always holds the next prompt's history. Room that followed max_tokens brought back
    at a short reply's turn the turns a long one had dropped; the prompt then differed from the
    cache right after the system prompt and was read whole again (issue 59: 12 of 477 tokens
    reused, SmolLM2 at 512 with replies of 30 to 200 tokens, python -m bench edge). A quarter
    is what the window's default (1,024 of 4,096) kept already."""
    return n_ctx - n_ctx // 4


@dataclass(frozen=True)
class Chat:
    """A chat request. ``response``: the grammar the reply must follow, as (kind, source);
    ``logprobs``: None, or how many alternatives to report with each token's log-probability;
    ``continue_text``: the reply goes on from this text (the window's Continue);
    ``read_calls``: False leaves calls in the text (the last reply of a round of tools);
    ``thinking``: what a reasoning model is asked of its thinking (engine.chat.reasoning)."""

    messages: tuple[Message, ...]
    sampling: SamplingParams
    tools: tuple[Tool, ...] = ()
    choice: ToolChoice = field(default_factory=ToolChoice)
    response: tuple[Literal["json_schema", "gbnf", "lark"], Any] | None = None
    logprobs: int | None = None
    continue_text: str | None = None
    read_calls: bool = True
    param_names: dict[str, str] = field(default_factory=dict)  # Duet's name -> the dialect's
    thinking: Thinking = field(default_factory=Thinking)
    embed: Embed | None = field(default=None, compare=False)  # ranks retrieved passages too


@dataclass(frozen=True)
class Policy:
    """How a prompt is made to fit ``n_ctx``: ``drop_oldest`` leaves out the oldest turns (the
    system message stays) to keep room for the reply (the window and the command line); else
    a prompt that does not fit is refused, and max_tokens is cut to what the context leaves
    (the server: a client's messages are its own)."""

    n_ctx: int
    drop_oldest: bool = True


@dataclass(frozen=True)
class PreparedTurn:
    prompt: list[int]
    sampling: SamplingParams
    grammar: Grammar | LazyGrammar | None
    logprobs: int | None
    fmt: Format | None  # how tool calls are read back (None: no tools, all text)
    names: tuple[str, ...] = ()  # the tools whose calls are read
    dropped: int = 0  # the oldest messages left out to fit the context
    sources: tuple[Source, ...] = ()  # what the model sees of the last message's files
    think: ThinkSpec | None = None  # a reasoning model's turn: its reply is split, maybe budgeted


def ready(model: Model, n_ctx: int) -> list[int]:
    """Make now, at the load, what every request needs of ``model`` and makes once: the
    vocabulary's markup tokens (a pass over it: 0.16 s on Qwen's 151,936 tokens) and the chat
    template, compiled and rendered. Else the first request paid them on top of its prompt.
    Returns the opening every chat without a system message starts with (BOS, the template's
    default system prompt, the user's header); empty when the template fails (it fails again,
    with its message, on the request that uses it)."""
    def tokens(text: str) -> list[int]:
        chat = Chat((Message("user", text),), SamplingParams(max_tokens=1))
        return prepare(model, chat, Policy(n_ctx)).prompt

    try:
        a, b = tokens("a"), tokens("b")
    except DuetError as e:
        log.info("the chat template cannot render a first message: %s", e)
        return []
    return a[:common_prefix(a, b)]


def shared_start(model: Model) -> int:
    """Tokens that every chat prompt of ``model`` starts with, whatever its system message
    (BOS, the template's first markup; none without a template: such a model is not chatted
    with): what the prompt cache's figures do not count as a hit."""
    if model.chat_template is None:
        return 0
    try:
        a = chat_tokens(model, [Message("system", "a"), Message("user", "x")])
        b = chat_tokens(model, [Message("system", "b"), Message("user", "x")])
    except DuetError:
        return 0
    return common_prefix(a, b)


def prepare(model: Model, chat: Chat, policy: Policy,
            cancel: threading.Event | None = None) -> PreparedTurn:
    """Check ``chat`` against the model and build its turn (tokenizes and compiles grammars:
    run it off an event loop). Raises RequestError, or the DuetError of a template that fails or
    a message too long for the context (MessageTooLongError), or DecodeError("cancelled")
    when ``cancel`` is set meanwhile."""
    names = chat.param_names
    where = names.get("messages", "messages")
    if model.chat_template is None:
        raise RequestError(no_template_line(model), where, "no_chat_template")
    tools = _check_tools(chat, names)
    _check_tool_messages(chat.messages, where)
    sources: list[Source] = []
    if any(m.attachments for m in chat.messages):  # the files' text, whole or retrieved
        # lazy: the readers and the passage index load only when a message carries files
        from engine.prompts.attachments import expand

        messages, sources = expand(chat.messages, policy.n_ctx,
                                   lambda text: len(model.tokenize_text(text)), chat.embed)
        chat = replace(chat, messages=tuple(messages))
    uses_tools = bool(tools) or any(m.role == "tool" or m.tool_calls for m in chat.messages)
    on, think, variables = _thinking(model, chat)
    dropped, fmt = 0, None
    try:
        if chat.continue_text is not None:
            prompt = chat_tokens(model, chat.messages, cancel=cancel, variables=variables) + \
                model.tokenize_text(chat.continue_text)
        elif uses_tools or not policy.drop_oldest:
            prompt, fmt = tool_prompt(model, chat.messages, tools, cancel=cancel,
                                      variables=variables)
        else:
            prompt, dropped = fit_messages(model, chat.messages,
                                           reply_budget(policy.n_ctx), cancel=cancel,
                                           variables=variables)
    except UnicodeError:
        raise RequestError("the messages are not valid Unicode text", where) from None
    except ImageError as e:
        raise RequestError(str(e), where, "invalid_image") from None
    if think is not None and not on and think.inside and chat.continue_text is None:
        # a template that opens the section whatever it is told: closed in the prompt
        prompt = prompt + model.tokenize(close_text(""), add_special=False, parse_special=True)
        think = ThinkSpec(inside=False, budget=0)
    grammar: Grammar | LazyGrammar | None = None
    try:
        if chat.response is not None:
            grammar = Grammar.compile(model, *chat.response)
        elif fmt is not None and chat.read_calls:
            grammar = call_grammar(model, fmt, tools, chat.choice)
    except GrammarError as e:
        field_name = "response_format" if chat.response is not None else "tools"
        shown = names.get(field_name, field_name)
        raise RequestError(f"{shown}: {e}", shown, "invalid_grammar") from None
    turn = PreparedTurn(prompt, chat.sampling, grammar, chat.logprobs, fmt if tools else None,
                tuple(t.name for t in tools) if chat.read_calls else (), dropped, tuple(sources),
                think)
    return turn if policy.drop_oldest else fit(turn, policy.n_ctx, where)


def _thinking(model: Model, chat: Chat) -> tuple[bool, ThinkSpec | None, dict[str, Any]]:
    """(whether the reply thinks, the turn's ThinkSpec, the template's variables) for a chat
    (engine.chat.reasoning): None and nothing for a model that does not think, which a request
    that asks for thinking is refused; a reply that must follow a grammar does not think."""
    t, names = chat.thinking, chat.param_names
    template = model.chat_template
    if not thinks(template):
        if t.on:
            shown = names.get("thinking", "thinking")
            raise RequestError(f"{shown}: this model does not think before answering", shown,
                               "thinking_not_supported")
        return False, None, {}
    if chat.response is not None:
        if t.on:
            shown = names.get("thinking", "thinking")
            raise RequestError(f"{shown}: a reply that follows a response format cannot think "
                               "first; turn thinking off", shown)
        t = Thinking(on=False)
    on = t.on is not False
    budget = 0 if not on else t.budget
    return on, ThinkSpec(opens_section(template, on), budget), {"enable_thinking": on}


@dataclass(frozen=True)
class Raw:
    """A prompt used as it is, with no template: text (its special tokens parsed, as llama-server
    does) or token ids (/v1/completions, Ollama's raw generate). ``response`` and ``logprobs`` as
    in ``Chat``."""

    prompt: str | list[int]
    sampling: SamplingParams
    response: tuple[Literal["json_schema", "gbnf", "lark"], Any] | None = None
    logprobs: int | None = None
    param_names: dict[str, str] = field(default_factory=dict)  # Duet's name -> the dialect's


def prepare_raw(model: Model, raw: Raw, n_ctx: int) -> PreparedTurn:
    """``prepare`` for a raw prompt: tokenized (or its ids checked), its grammar compiled, fitted
    to ``n_ctx`` as a client's prompt is (refused when it does not fit). Raises RequestError."""
    where = raw.param_names.get("prompt", "prompt")
    if isinstance(raw.prompt, list):
        if any(not 0 <= t < model.n_vocab for t in raw.prompt):
            raise RequestError(f"{where}: a token id is outside the vocabulary", where)
        prompt = list(raw.prompt)
    elif not raw.prompt:
        raise RequestError("the prompt is empty", where)
    else:
        try:
            prompt = model.tokenize(raw.prompt, add_special=True, parse_special=True)
        except UnicodeError:
            raise RequestError("the prompt is not valid Unicode text", where) from None
    grammar = None
    if raw.response is not None:
        try:
            grammar = Grammar.compile(model, *raw.response)
        except GrammarError as e:
            shown = raw.param_names.get("response_format", "response_format")
            raise RequestError(f"{shown}: {e}", shown, "invalid_grammar") from None
    return fit(PreparedTurn(prompt, raw.sampling, grammar, raw.logprobs, None), n_ctx, where)


def fit(turn: PreparedTurn, n_ctx: int, where: str) -> PreparedTurn:
    """The turn with max_tokens cut to what the context leaves; refused if it cannot fit
    (a raw prompt's turn, too, comes through here)."""
    if not turn.prompt:
        raise RequestError("the prompt is empty", "prompt")
    if len(turn.prompt) >= n_ctx:
        raise RequestError(f"this model's context is {n_ctx} tokens; the prompt has "
                           f"{len(turn.prompt)}", where, "context_length_exceeded")
    s = turn.sampling
    return replace(turn, sampling=replace(s, max_tokens=min(s.max_tokens, n_ctx - len(turn.prompt))))


def _check_tools(chat: Chat, names: dict[str, str]) -> list[Tool]:
    """The tools offered to the model (none under tool_choice none), checked."""
    where, choice_field = names.get("tools", "tools"), names.get("tool_choice", "tool_choice")
    if len(chat.tools) > MAX_TOOLS:
        raise RequestError(f"{where}: at most {MAX_TOOLS} tools", where)
    seen: set[str] = set()
    for i, t in enumerate(chat.tools):
        if not NAME.match(t.name):
            raise RequestError(f"{where}[{i}]: a function name is 1 to 64 letters, digits, _ or -",
                               f"{where}.{i}")
        if t.name in seen:
            raise RequestError(f"{where}[{i}]: the function {t.name!r} is given twice", f"{where}.{i}")
        seen.add(t.name)
        try:
            check_schema(t.parameters)
        except GrammarError as e:
            raise RequestError(f"{where}[{i}]: {e}", f"{where}.{i}") from None
    c = chat.choice
    if c.mode in ("required", "function") and chat.response is not None:
        raise RequestError(f"{choice_field} {c.mode} and a response format cannot be combined",
                           choice_field)
    if c.mode in ("required", "function") and not chat.tools:
        raise RequestError(f"{choice_field} {c.mode} needs tools", choice_field)
    if c.mode == "function" and c.name not in seen:
        raise RequestError(f"{choice_field}: no tool is named {c.name!r}", choice_field)
    return [] if c.mode == "none" else list(chat.tools)


def _check_tool_messages(messages: tuple[Message, ...], where: str) -> None:
    """A tool result must answer a call made before it."""
    ids: set[str] = set()
    for i, m in enumerate(messages):
        ids.update(c.id for c in m.tool_calls)
        if m.role == "tool" and m.tool_call_id not in ids:
            raise RequestError(f"{where}[{i}]: the tool result's id {m.tool_call_id!r} answers no "
                               "call made before it", f"{where}.{i}")


# -- the reply, as pieces -----------------------------------------------------------------
@dataclass(frozen=True)
class Text:
    """Text of the reply: ``tokens`` are the tokens whose log-probabilities came with it,
    ``source`` the token it came from (None: the reply's held-back tail); ``thinking``: text of
    its reasoning, not of its answer."""

    text: str
    tokens: tuple[Token, ...] = ()
    source: Token | None = None
    thinking: bool = False  # the reply's reasoning (a reasoning model's <think> section)


@dataclass(frozen=True)
class Call:
    call: ToolCall


@dataclass(frozen=True)
class End:
    done: Done
    finish: str  # stop, length or tool_calls


Piece = Text | Call | End


class Reader:
    """A turn's events as pieces, one event at a time: tokens as text (a reasoning model's
    thinking told apart first; with a format, tool calls taken out as they close), the Done as
    the rest and the End."""

    def __init__(self, turn: PreparedTurn) -> None:
        self.scanner = Scanner(turn.fmt, turn.names) if turn.fmt is not None else None
        self.splitter = ThinkSplitter(turn.think.inside) if turn.think is not None else None

    @property
    def reads_calls(self) -> bool:
        return self.scanner is not None

    def feed(self, item: object) -> list[Piece]:
        if isinstance(item, Token):
            return self._token(item)
        if isinstance(item, Done):
            out: list[Piece] = []
            tail = item.tail
            if self.splitter is not None:
                thought, tail = self.splitter.feed(tail)
                more_thought, more = self.splitter.flush()
                tail += more
                if thought + more_thought:
                    out.append(Text(thought + more_thought, thinking=True))
            rest: list[str | ToolCall] = []
            if self.scanner is not None:
                rest = self.scanner.feed(tail) + self.scanner.close()
            elif tail:
                rest = [tail]
            out += [Text(x) if isinstance(x, str) else Call(x) for x in rest]
            made_calls = self.scanner is not None and self.scanner.made_calls
            out.append(End(item, "tool_calls" if made_calls and item.reason == "stop"
                           else FINISH[item.reason]))
            return out
        return []

    def _token(self, item: Token) -> list[Piece]:
        tokens = (item,) if item.logprob is not None else ()
        text = item.text
        out: list[Piece] = []
        if self.splitter is not None:
            thought, text = self.splitter.feed(text)
            if thought or (tokens and not text):
                out.append(Text(thought, tokens, item, thinking=True))
                tokens = ()
        if self.scanner is None:
            return out + [Text(text, tokens, item)] if text or tokens or not out else out
        for x in self.scanner.feed(text):
            if isinstance(x, str):
                out.append(Text(x, tokens, item))
                tokens = ()
            else:
                out.append(Call(x))
        if tokens:
            out.append(Text("", tokens, item))
        return out
