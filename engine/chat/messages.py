"""Chat messages and prompt rendering with the model's own template, in a bounded Jinja sandbox.

A GGUF file's ``tokenizer.chat_template`` is code from a stranger: it is rendered only in
Jinja2's ImmutableSandboxedEnvironment (CVE-2024-34359 hit llama-cpp-python exactly there), and
within limits (engine.chat.template_limits): a time limit, a cancel event (DecodeError), capped
``range``, string and list repetition, numeric arguments and total output. A template that
exceeds them is refused with a one-line TemplateError that suggests the ChatML fallback.

Messages carry tool calls (an assistant's) and tool results (role ``tool``); the template gets
them, and the ``tools`` a request offers, as llama.cpp's Jinja mode passes them (arguments as
JSON objects; ``tojson`` as Python's ``json.dumps``, not Jinja's HTML-safe one).

``render_segments`` renders with a unique placeholder in place of each message's text, so the
caller can tell the template's own text (markup) from what a user wrote (never markup). The
strings inside tools and tool calls are left in place when they hold no markup (``inert``), and
replaced by placeholders too when they do; a placeholder that the template serialised with
``tojson`` comes back JSON-escaped.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import re
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jinja2

from engine.chat.template_limits import BoundedEnvironment, Limits, bounded
from engine.errors import DecodeError, TemplateError

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ROLES = ("system", "user", "assistant", "tool")
FALLBACK_HINT = "; the ChatML template can be used instead"


@dataclass(frozen=True)
class ToolCall:
    """A function call an assistant made; ``arguments``: the JSON text of an object."""

    id: str
    name: str
    arguments: str

    def parsed_arguments(self) -> Any:
        """The arguments as JSON (what templates expect), or the text when it does not parse."""
        try:
            return json.loads(self.arguments)
        except (ValueError, RecursionError):
            return self.arguments


@dataclass(frozen=True)
class Attachment:
    """A file attached to a message, as it was read once (engine.documents): its text is what
    the model sees, ``sha256`` the file's bytes when read (the path is never read again),
    ``pages`` where each PDF page starts in ``text``. ``mode``: whole (all of it goes into the
    prompt), retrieved (only the passages relevant to the message), or auto (whole when it
    fits the context with room for the reply)."""

    name: str
    kind: str
    sha256: str
    text: str
    pages: tuple[int, ...] = ()
    mode: str = "auto"


@dataclass(frozen=True)
class Image:
    """A picture attached to a message: its file's bytes (PNG, JPEG, WebP or GIF), kept as they
    came; ``sha256`` (hex) names it everywhere (placeholder ids, saved files, caches)."""

    data: bytes = field(repr=False)
    name: str = "image"

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class Message:
    """A chat message. An assistant's may carry ``tool_calls``; a ``tool`` message is the
    result of the call ``tool_call_id`` (of function ``name``); a user's may carry files
    (``attachments``: engine.prompts.attachments puts them into the prompt) and pictures
    (``images``: read by the model's projector, before the message's text)."""

    role: str
    content: str
    time: float = field(default=0.0, compare=False)
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    attachments: tuple[Attachment, ...] = ()
    images: tuple[Image, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}")


@dataclass(frozen=True)
class Segment:
    """A piece of a rendered prompt: the template's own text (``markup``), the whole text of
    ``messages[message]``, or a string from a tool or a tool call (``message`` the message it
    belongs to, None for the tools offered)."""

    text: str
    message: int | None
    markup: bool = False


def _raise(message: str) -> None:
    raise TemplateError(f"the chat template refused: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(str(fmt)[:100])


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """Python's json.dumps (as Hugging Face and llama.cpp render templates), with the
    placeholders inside it marked as JSON-escaped."""
    out = json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators,
                     sort_keys=sort_keys)
    return out.translate(_TO_JSON_MARKS)


_RAW_OPEN, _RAW_CLOSE, _JSON_OPEN, _JSON_CLOSE = "\ue000", "\ue001", "\ue002", "\ue003"
_TO_JSON_MARKS = str.maketrans({_RAW_OPEN: _JSON_OPEN, _RAW_CLOSE: _JSON_CLOSE})
_MARKS = re.compile("[\ue000-\ue003]")


@lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
    env.globals.update(raise_exception=_raise, strftime_now=_strftime_now)
    env.filters["tojson"] = _tojson
    try:
        return env.from_string(source)
    except jinja2.TemplateError as e:
        raise TemplateError(f"the chat template does not parse: {e}") from None
    except (RecursionError, MemoryError):
        raise TemplateError("the chat template is too deeply nested to parse") from None


def _run(tpl: jinja2.Template, messages: list[dict[str, Any]], tools: Any, *, bos_token: str,
         eos_token: str, add_generation_prompt: bool, limits: Limits,
         cancel: threading.Event | None, extra: int,
         variables: Mapping[str, Any] | None = None) -> str:
    budget = limits.with_output(limits.max_output + extra)
    try:
        with bounded(budget, cancel):
            return tpl.environment.checked_concat(tpl.generate(  # type: ignore[attr-defined]
                **(variables or {}), messages=messages, tools=tools or None,
                add_generation_prompt=add_generation_prompt,
                bos_token=bos_token, eos_token=eos_token))
    except TemplateError as e:
        if "limit" in str(e):
            raise TemplateError(f"{e}{FALLBACK_HINT}") from None
        raise
    except DecodeError:  # cancelled
        raise
    except jinja2.exceptions.SecurityError as e:
        raise TemplateError(f"the chat template tried something unsafe: {e}") from None
    except (RecursionError, MemoryError) as e:
        raise TemplateError(f"the chat template went past its limits ({type(e).__name__})"
                            f"{FALLBACK_HINT}") from None
    except Exception as e:  # a template can fail in any way; never let that reach the user raw
        raise TemplateError(f"the chat template failed: {type(e).__name__}: {e}"[:300]) from None


class _Marks:
    """The placeholders of one render: a text for each, and whose it is."""

    def __init__(self, inert: Callable[[str], bool] | None) -> None:
        self.nonce = secrets.token_hex(8)
        self.texts: list[str] = []
        self.owners: list[int | None] = []
        self.contents: set[int] = set()  # the placeholders that stand for a message's text
        self.inert = inert

    def mark(self, text: str, owner: int | None, content: bool = False) -> str:
        self.texts.append(text)
        self.owners.append(owner)
        if content:
            self.contents.add(len(self.texts) - 1)
        return f"{_RAW_OPEN}{self.nonce}:{len(self.texts) - 1}{_RAW_CLOSE}"

    def leaf(self, value: Any, owner: int | None) -> Any:
        """``value`` (JSON) with each string that holds markup replaced by a placeholder."""
        if isinstance(value, str):
            return value if self.inert is not None and self.inert(value) else \
                self.mark(value, owner)
        if isinstance(value, dict):
            return {self.leaf(k, owner): self.leaf(v, owner) for k, v in value.items()}
        if isinstance(value, list):
            return [self.leaf(v, owner) for v in value]
        return value

    def pattern(self) -> re.Pattern[str]:
        return re.compile(f"[{_RAW_OPEN}{_JSON_OPEN}]{self.nonce}:(\\d+)[{_RAW_CLOSE}{_JSON_CLOSE}]")


def _dicts(messages: Sequence[Message], content: Callable[[int, Message], str],
           marks: _Marks | None) -> list[dict[str, Any]]:
    """The messages as a template sees them (tool calls' strings through ``marks``)."""
    def leaf(value: Any, i: int) -> Any:
        return marks.leaf(value, i) if marks is not None else value

    out = []
    for i, m in enumerate(messages):
        d: dict[str, Any] = {"role": m.role, "content": content(i, m)}
        if m.tool_calls:
            d["tool_calls"] = [{"id": leaf(c.id, i), "type": "function", "function": {
                "name": leaf(c.name, i), "arguments": leaf(c.parsed_arguments(), i)}}
                for c in m.tool_calls]
        if m.role == "tool":
            d["tool_call_id"] = leaf(m.tool_call_id or "", i)
            d["name"] = leaf(m.name or "", i)
        out.append(d)
    return out


def render(messages: Sequence[Message], template: str | None, *, tools: Sequence[Any] = (),
           bos_token: str = "", eos_token: str = "", add_generation_prompt: bool = True,
           limits: Limits = Limits(), cancel: threading.Event | None = None,
           variables: Mapping[str, Any] | None = None) -> str:
    """Render ``messages`` with ``template`` (ChatML when None), ending with the generation
    prompt; ``variables``: more that the template gets (``enable_thinking``)."""
    return _run(_compile(template or CHATML), _dicts(messages, lambda i, m: m.content, None),
                list(tools), bos_token=bos_token, eos_token=eos_token,
                add_generation_prompt=add_generation_prompt, limits=limits, cancel=cancel,
                extra=sum(len(m.content) for m in messages), variables=variables)


def render_segments(messages: Sequence[Message], template: str | None, *,
                    tools: Sequence[Any] = (), inert: Callable[[str], bool] | None = None,
                    bos_token: str = "", eos_token: str = "", add_generation_prompt: bool = True,
                    limits: Limits = Limits(), cancel: threading.Event | None = None,
                    variables: Mapping[str, Any] | None = None) -> list[Segment]:
    """The rendered prompt as segments: template text, message texts and the strings of tools
    and tool calls, in order.

    Each message's text is replaced by a unique random placeholder while rendering, then put
    back as its own segment; so is every string of a tool or a tool call that ``inert`` does not
    pass (None: all of them). A template that drops, repeats or rewrites a message's text makes
    its placeholder appear other than once; then the message's text is located in a normal
    render instead, and a template whose output cannot be split either way is refused (as is
    any rewritten placeholder when tools or tool calls are present). ``variables``: as in
    ``render``."""
    tpl = _compile(template or CHATML)
    marks = _Marks(inert)
    # an empty text stays empty: templates test it (``{% if message.content %}``)
    contents = [marks.mark(m.content, i, content=True) if m.content or m.images else ""
                for i, m in enumerate(messages)]
    dicts = _dicts(messages, lambda i, m: contents[i], marks)
    marked_tools = marks.leaf(list(tools), None)
    extra = sum(len(t) for t in marks.texts)
    kw = dict(bos_token=bos_token, eos_token=eos_token,
              add_generation_prompt=add_generation_prompt, limits=limits, cancel=cancel,
              extra=extra, variables=variables)
    text = _run(tpl, dicts, marked_tools, **kw)  # type: ignore[arg-type]
    segments = _split(text, marks)
    with_tools = bool(tools) or any(m.tool_calls or m.role == "tool" for m in messages)
    if segments is None and not with_tools:
        text = _run(tpl, _dicts(messages, lambda i, m: m.content, None), [], **kw)  # type: ignore[arg-type]
        segments = _locate(text, [m.content for m in messages])
    if segments is None:
        raise TemplateError("the chat template rewrites message text, so its markup cannot be "
                            f"told apart from what was written{FALLBACK_HINT}")
    return segments


def _split(text: str, marks: _Marks) -> list[Segment] | None:
    """Segments of a placeholder render, or None unless each message's placeholder is there at
    most once and in order, and no placeholder was altered (a message the template leaves out on
    purpose is fine; the strings of tools and tool calls may appear any number of times)."""
    out: list[Segment] = []
    pos, last_message = 0, -1
    for match in marks.pattern().finditer(text):
        if match.start() > pos:
            out.append(Segment(text[pos:match.start()], None, markup=True))
        i = int(match.group(1))
        if i >= len(marks.texts):
            return None
        value = marks.texts[i]
        if i in marks.contents:  # a message's text: once, in order
            if i <= last_message:
                return None
            last_message = i
        if match.group(0)[0] == _JSON_OPEN:  # serialised by tojson: as it would be there
            value = json.dumps(value, ensure_ascii=False)[1:-1]
        if value or i in marks.contents:  # (an empty text marked: its message's pictures)
            out.append(Segment(value, marks.owners[i]))
        pos = match.end()
    if pos < len(text):
        out.append(Segment(text[pos:], None, markup=True))
    if any(s.markup and _MARKS.search(s.text) for s in out):
        return None  # a placeholder the template rewrote
    return out


def _locate(text: str, contents: Sequence[str]) -> list[Segment] | None:
    """Segments of a normal render, finding each non-empty message text in order; None when one
    is not found."""
    out: list[Segment] = []
    pos = 0
    for i, content in enumerate(contents):
        if not content:
            continue
        at = text.find(content, pos)
        if at < 0:
            return None
        if at > pos:
            out.append(Segment(text[pos:at], None, markup=True))
        out.append(Segment(content, i))
        pos = at + len(content)
    if pos < len(text):
        out.append(Segment(text[pos:], None, markup=True))
    return out
