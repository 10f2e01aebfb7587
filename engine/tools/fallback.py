"""Tools for a template that does not render them: the functions are described in the system
message, calls are written as fenced JSON blocks (the form small models fall back on anyway),
and results come back as user messages. The generic format (engine.tools.formats) reads the
calls."""

from __future__ import annotations

import json
from collections.abc import Sequence

from engine.chat.messages import Message
from engine.tools import Tool

INSTRUCTIONS = (
    "You can call these functions:\n{tools}\n\n"
    "To call a function, reply with only a JSON object in a ```json code block, "
    'like this:\n```json\n{{"name": "<function name>", "arguments": {{<the arguments>}}}}\n```\n'
    "You may call several functions, one block each. The results come back in a message that "
    "starts with \"Result of\"; then answer with them.")


def messages(msgs: Sequence[Message], tools: Sequence[Tool]) -> list[Message]:
    """``msgs`` as a template without tools can render them, the tools described up front."""
    described = INSTRUCTIONS.format(tools="\n".join(
        json.dumps(t.spec()["function"], ensure_ascii=False) for t in tools))
    out: list[Message] = []
    rest = list(msgs)
    if rest and rest[0].role == "system":
        out.append(Message("system", f"{rest.pop(0).content}\n\n{described}"))
    elif tools:
        out.append(Message("system", described))
    for m in rest:
        if m.tool_calls:
            blocks = "\n".join(
                f"```json\n{json.dumps({'name': c.name, 'arguments': c.parsed_arguments()}, ensure_ascii=False)}\n```"
                for c in m.tool_calls)
            out.append(Message("assistant", f"{m.content}\n{blocks}".strip(), m.time))
        elif m.role == "tool":
            out.append(Message("user", f"Result of {m.name or 'the function'}:\n{m.content}",
                               m.time))
        else:
            out.append(m)
    return out
