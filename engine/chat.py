"""Chat messages and prompt rendering with the model's own template, in a bounded Jinja sandbox.

A GGUF file's ``tokenizer.chat_template`` is code from a stranger: it is rendered only in
Jinja2's ImmutableSandboxedEnvironment (CVE-2024-34359 hit llama-cpp-python exactly there), and
within limits (engine.template_limits): a time limit, a cancel event (DecodeError), capped
``range``, string and list repetition, numeric arguments and total output. A template that
exceeds them is refused with a one-line TemplateError that suggests the ChatML fallback.

``render_segments`` renders with a unique placeholder in place of each message's text, so the
caller can tell the template's own text (markup) from what a user wrote (never markup).
"""

from __future__ import annotations

import datetime
import secrets
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import jinja2

from engine.errors import DecodeError, TemplateError
from engine.template_limits import BoundedEnvironment, Limits, bounded

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ROLES = ("system", "user", "assistant")
FALLBACK_HINT = "; the ChatML template can be used instead"


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    time: float = field(default=0.0, compare=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}")


@dataclass(frozen=True)
class Segment:
    """A piece of a rendered prompt: the template's own text (``message`` None) or the whole
    text of ``messages[message]``."""

    text: str
    message: int | None


def _raise(message: str) -> None:
    raise TemplateError(f"the chat template refused: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(str(fmt)[:100])


@lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
    env.globals.update(raise_exception=_raise, strftime_now=_strftime_now)
    try:
        return env.from_string(source)
    except jinja2.TemplateError as e:
        raise TemplateError(f"the chat template does not parse: {e}") from None
    except (RecursionError, MemoryError):
        raise TemplateError("the chat template is too deeply nested to parse") from None


def _run(tpl: jinja2.Template, contents: Sequence[str], roles: Sequence[str], *, bos_token: str,
         eos_token: str, add_generation_prompt: bool, limits: Limits,
         cancel: threading.Event | None) -> str:
    messages = [{"role": r, "content": c} for r, c in zip(roles, contents)]
    budget = limits.with_output(limits.max_output + sum(len(c) for c in contents))
    try:
        with bounded(budget, cancel):
            return tpl.environment.checked_concat(tpl.generate(  # type: ignore[attr-defined]
                messages=messages, add_generation_prompt=add_generation_prompt,
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


def render(messages: Sequence[Message], template: str | None, *, bos_token: str = "",
           eos_token: str = "", add_generation_prompt: bool = True, limits: Limits = Limits(),
           cancel: threading.Event | None = None) -> str:
    """Render ``messages`` with ``template`` (ChatML when None), ending with the generation prompt."""
    return _run(_compile(template or CHATML), [m.content for m in messages],
                [m.role for m in messages], bos_token=bos_token, eos_token=eos_token,
                add_generation_prompt=add_generation_prompt, limits=limits, cancel=cancel)


def render_segments(messages: Sequence[Message], template: str | None, *, bos_token: str = "",
                    eos_token: str = "", add_generation_prompt: bool = True,
                    limits: Limits = Limits(), cancel: threading.Event | None = None
                    ) -> list[Segment]:
    """The rendered prompt as segments: template text and message texts, in order.

    Each message's text is replaced by a unique random placeholder while rendering, then put
    back as its own segment. A template that drops, repeats or rewrites a message's text makes
    its placeholder appear other than once; then the message's text is located in a normal
    render instead, and a template whose output cannot be split either way is refused."""
    tpl = _compile(template or CHATML)
    roles = [m.role for m in messages]
    contents = [m.content for m in messages]
    nonce = secrets.token_hex(8)
    marks = [f"\ue000{nonce}:{i}\ue001" for i in range(len(messages))]
    text = _run(tpl, marks, roles, bos_token=bos_token, eos_token=eos_token,
                add_generation_prompt=add_generation_prompt, limits=limits, cancel=cancel)
    segments = _split(text, marks, contents)
    if segments is None:
        text = _run(tpl, contents, roles, bos_token=bos_token, eos_token=eos_token,
                    add_generation_prompt=add_generation_prompt, limits=limits, cancel=cancel)
        segments = _locate(text, contents)
    if segments is None:
        raise TemplateError("the chat template rewrites message text, so its markup cannot be "
                            f"told apart from what was written{FALLBACK_HINT}")
    return segments


def _split(text: str, marks: Sequence[str], contents: Sequence[str]) -> list[Segment] | None:
    """Segments of a placeholder render, or None unless each placeholder is there once, in order
    and unaltered (a message the template leaves out on purpose is fine)."""
    out: list[Segment] = []
    pos = 0
    for i, mark in enumerate(marks):
        at = text.find(mark, pos)
        if at < 0:
            if mark in text:
                return None  # out of order
            continue
        if text.find(mark, at + len(mark)) >= 0:
            return None
        if at > pos:
            out.append(Segment(text[pos:at], None))
        if contents[i]:
            out.append(Segment(contents[i], i))
        pos = at + len(mark)
    if pos < len(text):
        out.append(Segment(text[pos:], None))
    if any(s.message is None and "\ue000" in s.text for s in out):
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
            out.append(Segment(text[pos:at], None))
        out.append(Segment(content, i))
        pos = at + len(content)
    if pos < len(text):
        out.append(Segment(text[pos:], None))
    return out


