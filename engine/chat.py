"""Chat messages and prompt rendering with the model's own template, in a Jinja sandbox.

A GGUF file's ``tokenizer.chat_template`` is code from a stranger: it is rendered only in
Jinja2's ImmutableSandboxedEnvironment (CVE-2024-34359 hit llama-cpp-python exactly there).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import TemplateError

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Message:
    role: str
    content: str
    time: float = field(default=0.0, compare=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}")


def _raise(message: str) -> None:
    raise TemplateError(f"the chat template refused: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


@lru_cache(maxsize=8)
def _compile(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        undefined=jinja2.Undefined)
    env.globals.update(raise_exception=_raise, strftime_now=_strftime_now)
    try:
        return env.from_string(source)
    except jinja2.TemplateError as e:
        raise TemplateError(f"the chat template does not parse: {e}") from None


def render(messages: Sequence[Message], template: str | None, *, bos_token: str = "",
           eos_token: str = "", add_generation_prompt: bool = True) -> str:
    """Render ``messages`` with ``template`` (ChatML when None), ending with the generation prompt."""
    tpl = _compile(template or CHATML)
    try:
        return tpl.render(
            messages=[{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except TemplateError:
        raise
    except jinja2.exceptions.SecurityError as e:
        raise TemplateError(f"the chat template tried something unsafe: {e}") from None
    except Exception as e:  # a template can fail in any way; never let that reach the user raw
        raise TemplateError(f"the chat template failed: {type(e).__name__}: {e}") from None
