"""Tool calling: the functions a request offers, how each model family writes a call, and how a
reply is read back into calls (formats, scanner); the rules of tool rounds (machine) and what a
call gives back, in the same words wherever it runs (calls). No HTTP here: the server's dialects
and the app's tools (MCP) share it.

May import: models, llama, cache, decode, chat.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_ROUNDS = 4  # replies in a row that may call tools (the CLI's and the window's default)


@dataclass(frozen=True)
class Tool:
    """A function the model may call: ``parameters`` is the JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def spec(self) -> dict[str, Any]:
        """As chat templates and OpenAI's API take it."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolChoice:
    """auto: the model decides; none: no call; required: at least one call; function: a call of
    ``name``. ``parallel``: more than one call in a reply."""

    mode: Literal["auto", "none", "required", "function"] = "auto"
    name: str | None = None
    parallel: bool = True


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)
