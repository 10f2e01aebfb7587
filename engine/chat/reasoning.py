"""Reasoning models: whether a chat template thinks before answering, and what a request asks
of that thinking.

A template thinks when its text mentions the ``<think>``/``</think>`` markers or an
``enable_thinking`` variable, or when its generation prompt ends inside a ``<think>`` section
(DeepSeek-R1 distills end it with ``<think>\\n``). Such a template gets ``enable_thinking``
(True unless the request turns thinking off, as llama-server passes it): Qwen3's answers an off
with an empty section ``<think>\\n\\n</think>\\n\\n``; a template that opens the section whatever
it is told gets the closing marker appended to its prompt instead (``close_text``), so that the
reply is an answer. A template that does not think is rendered as it always was, and a request
that asks it to think is refused.

The reply's thinking is split from its answer (engine.chat.think_split) and may be held to a
budget of tokens: once the reply has spent that many inside the section, the engine closes it
itself (engine.decode.think_budget) and the answer follows. The request's controls map to it:

======================================  =====================================
OpenAI ``reasoning_effort``,            ``none``: off; ``minimal``: 128 tokens;
Responses ``reasoning.effort``,         ``low``: 512; ``medium``: 2048;
Ollama ``think``                        ``high``: no limit (Ollama: true/false too)
Anthropic ``thinking``                  ``{"type": "enabled", "budget_tokens": N}``: N;
                                        ``{"type": "disabled"}``: off
the server's ``--reasoning-budget N``   the budget when a request gives none
======================================  =====================================
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

OPEN, CLOSE = "<think>", "</think>"
EFFORT_BUDGET: dict[str, int | None] = {"minimal": 128, "low": 512, "medium": 2048,
                                        "high": None}
EFFORTS = ("none", *EFFORT_BUDGET)


@dataclass(frozen=True)
class Thinking:
    """What a request asks: ``on`` None leaves it to the model (it thinks when its template
    does), False turns it off, True asks for it; ``budget``: the most tokens it may spend
    thinking (None: no limit)."""

    on: bool | None = None
    budget: int | None = None


OFF = Thinking(on=False)


def from_effort(effort: str | None) -> Thinking:
    """An effort level (``none``, ``minimal``, ``low``, ``medium``, ``high``) as a request's
    thinking; None: the model's default. Raises ValueError for another word."""
    if effort is None:
        return Thinking()
    if effort == "none":
        return OFF
    if effort not in EFFORT_BUDGET:
        raise ValueError(f"{effort!r} is not an effort ({', '.join(EFFORTS)})")
    return Thinking(on=True, budget=EFFORT_BUDGET[effort])


@dataclass(frozen=True)
class ThinkSpec:
    """A turn's thinking, for the reply: ``inside``: the prompt left the reply inside a
    section (it starts thinking); ``budget``: tokens it may spend inside (None: no limit)."""

    inside: bool
    budget: int | None = None


def thinks(template: str | None) -> bool:
    """Whether ``template`` is a reasoning model's (see the module doc)."""
    if not template:
        return False
    if OPEN in template or CLOSE in template or "enable_thinking" in template:
        return True
    return opens_section(template, True)


def variables(template: str | None, on: bool) -> dict[str, Any]:
    """What a thinking template is rendered with (nothing for another)."""
    return {"enable_thinking": on} if thinks(template) else {}


def opens_section(template: str | None, on: bool) -> bool:
    """Whether the generation prompt ends inside a ``<think>`` section (the reply starts
    thinking), rendered with ``enable_thinking`` = ``on``. A template that fails to render
    here is taken as not opening one (a real render then says what is wrong)."""
    return bool(template) and _opens(template, on)  # type: ignore[arg-type]


@lru_cache(maxsize=32)
def _opens(template: str, on: bool) -> bool:
    from engine.chat.messages import Message, render
    from engine.errors import DuetError

    msgs = [Message("user", "Hi")]
    try:
        with_prompt = render(msgs, template, variables={"enable_thinking": on})
        without = render(msgs, template, add_generation_prompt=False,
                         variables={"enable_thinking": on})
    except DuetError:
        return False
    tail = with_prompt[len(without):] if with_prompt.startswith(without) else with_prompt[-64:]
    return inside(tail)


def inside(text: str) -> bool:
    """Whether ``text`` ends inside a section (its last marker opens one)."""
    return text.rfind(OPEN) > text.rfind(CLOSE)


def close_text(thought: str) -> str:
    """The text that closes a section after ``thought``: the closing marker on a line of its
    own, and the blank line before the answer (as the reasoning templates write past turns)."""
    return ("" if not thought or thought.endswith("\n") else "\n") + CLOSE + "\n\n"
