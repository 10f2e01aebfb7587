"""How a model family writes tool calls, told from its chat template (llama.cpp's
``common/chat.cpp`` keeps the reference list of formats):

- hermes (Qwen 2.5/3, Hermes, many fine-tunes): ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``;
- mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``;
- llama3 (Llama 3.1+): ``<|python_tag|>`` or a bare ``{"name": ..., "parameters": {...}}``;
- generic (a template that renders tools but names no format, and templates without tools, which
  get engine.tools.fallback's prompt): a JSON object in a fenced block or as the whole reply.

Every format also reads the generic forms, because small models often write a call as a fenced
JSON block instead of their template's tags. A block is a call only when it parses as JSON,
names a function the request offered and has an object of arguments; anything else stays text.
``grammar`` gives the Lark grammar (llguidance) that forces a reply made only of calls, for
``tool_choice`` required or a named function.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.chat.messages import ToolCall
from engine.llama.model import Model
from engine.tools import Tool, ToolChoice, new_call_id

FENCE = "```"


@dataclass(frozen=True)
class Format:
    """``opener``: the text that starts this family's calls (and ``closer`` ends one; empty:
    the end of the reply); ``arguments``: the key the family uses for the arguments."""

    name: str
    opener: str = ""
    closer: str = ""
    arguments: str = "arguments"

    def openers(self) -> list[tuple[str, str]]:
        """(opener, closer) pairs a call may start with, this family's first."""
        own = [(self.opener, self.closer)] if self.opener else []
        return own + [(FENCE, FENCE)]


HERMES = Format("hermes", "<tool_call>", "</tool_call>")
MISTRAL = Format("mistral", "[TOOL_CALLS]", "")
LLAMA3 = Format("llama3", "<|python_tag|>", "", "parameters")
GENERIC = Format("generic")


def detect(template: str | None) -> Format:
    """The family whose calls ``template`` renders (generic when it names none)."""
    t = template or ""
    if "<tool_call>" in t:
        return HERMES
    if "[TOOL_CALLS]" in t:
        return MISTRAL
    if "<|python_tag|>" in t or "ipython" in t:
        return LLAMA3
    return GENERIC


def renders_tools(template: str | None) -> bool:
    """Whether the template shows the model the tools it is given (else: our own prompt)."""
    return bool(template) and "tools" in template  # type: ignore[operator]


# -- reading calls --------------------------------------------------------------------------
def read_block(fmt: Format, block: str, opener: str, closer: str,
               names: Sequence[str]) -> list[ToolCall] | None:
    """The calls in one block (from its opener to its closer), or None when it is not calls."""
    body = block if opener in ("{", "[") else block[len(opener):]  # a bare object is its own body
    if closer and body.endswith(closer):
        body = body[:-len(closer)]
    if opener == FENCE:
        first, _, rest = body.partition("\n")
        if first.strip() not in ("", "json"):
            return None
        body = rest
    return read_calls(fmt, body, names)


def read_calls(fmt: Format, body: str, names: Sequence[str]) -> list[ToolCall] | None:
    """Calls from JSON text: one object, or a list of them. Qwen 2.5's template shows the form
    as ``{{"name": ..., "arguments": ...}}`` (braces doubled by its Jinja string), and its models
    sometimes copy it: one doubled pair of braces is read as one."""
    text = body.strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        if not (text.startswith("{{") and text.endswith("}}")):
            return None
        try:
            data = json.loads(text[1:-1])
        except (ValueError, RecursionError):
            return None
    items = data if isinstance(data, list) else [data]
    calls = []
    for item in items:
        call = _call(item, fmt, names)
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _call(item: Any, fmt: Format, names: Sequence[str]) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):  # {"function": {"name", "arguments"}}
        item = item["function"]
    name = item.get("name")
    args = item.get(fmt.arguments, item.get("arguments", item.get("parameters")))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    if name not in names or not isinstance(args, dict):
        return None
    return ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False))


# -- writing only calls (constrained) ---------------------------------------------------------
# A call's JSON as the model likes to write it (pretty-printed or not), each run of whitespace
# bounded: the grammar enforces that the reply is calls with valid arguments, not a layout.
CALL_JSON = {"whitespace_flexible": True, "whitespace_pattern": "[ \\t\\n]{0,40}"}


def grammar(fmt: Format, model: Model, tools: Sequence[Tool], choice: ToolChoice) -> str:
    """The Lark grammar of a reply made of calls of ``tools`` (one named by ``choice``, or any;
    several when ``choice.parallel``): each in the family's own form or as a fenced JSON block
    (small models often prefer the block: measured with Qwen2.5-Coder-1.5B, which writes its
    calls that way unprompted and, forced into its template's tags, kept calling)."""
    offered = [t for t in tools if choice.mode != "function" or t.name == choice.name]
    lines = ["start: block" + (' ("\\n" block)*' if choice.parallel else ""),
             f"body: {' | '.join(f'fn{i}' for i in range(len(offered)))}",
             'fenced: "```json\\n" body "\\n```"']
    if fmt is HERMES:
        lines.append(f'tagged: {_literal(model, fmt.opener)} "\\n" body "\\n" '
                     f'{_literal(model, fmt.closer)}')
        lines.append("block: tagged | fenced")
    elif fmt is MISTRAL:
        lines.append(f'tagged: {_literal(model, fmt.opener)} "[" body "]"')
        lines.append("block: tagged | fenced")
    else:
        lines.append("block: fenced | body")
    for i, tool in enumerate(offered):
        schema = {"type": "object", "properties": {
            "name": {"const": tool.name}, fmt.arguments: closed(tool.parameters)},
            "required": ["name", fmt.arguments], "additionalProperties": False,
            "x-guidance": CALL_JSON}
        lines.append(f"fn{i}: %json {json.dumps(schema)}")
    return "\n".join(lines)


def closed(schema: Any) -> Any:
    """``schema`` with its objects closed where it does not say: no properties beyond those it
    names (llama.cpp's grammars read a missing ``additionalProperties`` so too). Open, a tool
    without parameters let SmolLM2 fill its arguments with invented keys to the length limit."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) if k in _NESTED else v for k, v in schema.items()}
    for key in ("properties", "$defs", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {name: closed(s) for name, s in out[key].items()}
    if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


_NESTED = ("items", "anyOf", "oneOf", "allOf", "not", "prefixItems")


def _literal(model: Model, text: str) -> str:
    """A Lark term for ``text``: the special token when the vocabulary has one, else the text."""
    ids = model.tokenize(text, add_special=False, parse_special=True)
    if len(ids) == 1 and not model.inert(text):
        return f"<[{ids[0]}]>"
    return json.dumps(text)
