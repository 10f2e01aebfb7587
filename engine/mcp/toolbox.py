"""The enabled tools as a model sees them: unique, valid function names and their specs.

A tool keeps its own name when that is a valid function name (``^[a-zA-Z0-9_-]{1,64}$``) that
no other server's tool shares; otherwise characters outside the set become ``_`` and tools whose
names clash across servers are all named ``server__tool``, so no server wins a name by its
place in the list. What still clashes after cutting to 64 characters gets ``_2``, ``_3``…
A :class:`Toolbox` is one frozen snapshot: the specs given to a model and the way back from a
name it calls to (server, tool) come from the same object.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
MAX_NAME = 64


@dataclass(frozen=True)
class ToolInfo:
    """A tool as its server lists it."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class FunctionTool:
    """One tool offered to a model under ``function`` (its unique function name)."""

    function: str
    server: str
    tool: ToolInfo

    def spec(self) -> dict[str, Any]:
        """The OpenAI-style function spec (a fresh copy the caller may change)."""
        schema = copy.deepcopy(dict(self.tool.input_schema))
        if schema.get("type") != "object":
            schema = {"type": "object", "properties": {}}
        return {"type": "function", "function": {
            "name": self.function, "description": self.tool.description, "parameters": schema}}


def _clean(name: str) -> str:
    return _INVALID.sub("_", name)[:MAX_NAME] or "tool"


@dataclass(frozen=True)
class Toolbox:
    """The tools offered to a model, in server order then the server's own order."""

    tools: tuple[FunctionTool, ...] = ()

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.tools]

    def resolve(self, function: str) -> tuple[str, str] | None:
        """(server, tool) for a function name a model called; None for a name not offered."""
        found = next((t for t in self.tools if t.function == function), None)
        return None if found is None else (found.server, found.tool.name)

    def names(self) -> tuple[str, ...]:
        return tuple(t.function for t in self.tools)


def build_toolbox(servers: Sequence[tuple[str, Sequence[ToolInfo]]]) -> Toolbox:
    """Name every (server, tool) uniquely; see the module's docstring for the rule."""
    clashes = Counter(_clean(t.name) for _, tools in servers for t in {x.name: x for x in tools}.values())
    taken: set[str] = set()
    out: list[FunctionTool] = []
    for server, tools in servers:
        seen: set[str] = set()
        for tool in tools:
            if tool.name in seen:  # a server listing a name twice: the first one counts
                continue
            seen.add(tool.name)
            base = _clean(tool.name)
            if clashes[base] > 1:
                base = _clean(f"{server}__{tool.name}")
            name, n = base, 1
            while name in taken:
                n += 1
                name = f"{base[:MAX_NAME - len(str(n)) - 1]}_{n}"
            taken.add(name)
            out.append(FunctionTool(name, server, tool))
    return Toolbox(tuple(out))
