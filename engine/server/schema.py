"""Request bodies, validated by pydantic (strict types: a string is not a number).

Fields that OpenAI clients commonly send and that Duet has no use for (``user``, ``n`` = 1, ...)
are accepted; fields Duet would have to ignore silently (``n`` > 1, ``logit_bias``, ``echo``,
...) are refused with a 400 that names them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine import params
from engine.decode.sampling import SamplingParams
from engine.server.errors import ApiError, bad_request

READ = frozenset(n for cls in (SamplingParams,) for r in params.table(cls)
                 for n in r.spec.api.get("openai", ()))


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class ImageURL(_Body):
    url: str
    detail: str | None = None


class TextPart(_Body):
    """A part of a message's content: text, or a picture (``image_url``, a data URL)."""

    type: str
    text: str | None = None
    image_url: ImageURL | None = None


class FunctionCall(_Body):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCallBody(_Body):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Body):
    # content is required, except in an assistant's message that makes calls
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
        {"required": ["role", "tool_calls"], "properties": {"role": {"const": "assistant"}}}]})

    role: str = Field(json_schema_extra={"enum": ["system", "developer", "user", "assistant",
                                                  "tool"]})
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallBody] | None = None
    tool_call_id: str | None = None


class FunctionSpec(_Body):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(_Body):
    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Body):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class _Request(_Body):
    """What chat and text completions share. The sampling fields (temperature, top_p, stop,
    max_tokens, ...) and logprobs/top_logprobs are not declared here: they are rows of the
    parameter table, read by ``engine.params.read`` (extra fields are allowed through to it)."""

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, json_schema_extra={"enum": [1]})
    user: str | None = None
    response_format: ResponseFormat | None = None
    grammar: str | None = None  # llama-server's GBNF field
    json_schema: dict[str, Any] | None = None  # llama-server's schema field

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(json_schema_extra={"minItems": 1})
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int]
    logprobs: int | None = Field(default=None, ge=0, le=20)  # the legacy API's count


# Fields refused unless they hold their neutral value (Duet would otherwise ignore them), unless
# the parameter table reads them (engine.params: those are honoured).
NEUTRAL: dict[str, Any] = {
    "n": 1, "functions": (None, []), "function_call": (None, "none"), "logit_bias": (None, {}),
    "echo": (None, False), "suffix": (None, ""), "best_of": (None, 1),
}


def _is_type_tag(part: object) -> bool:
    """pydantic names the member of a union in an error's location ("stop.str"): not a field."""
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool", "none"))


def parse(cls: type[_Body], data: Any) -> Any:
    """Validate a decoded JSON body as ``cls``; a 400 naming the first bad field otherwise."""
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object")
    try:
        body = cls.model_validate(data)
    except ValidationError as e:
        # the most specific error: in a union (a string or a list of parts) the part at fault
        err = max(e.errors(include_url=False), key=lambda x: len(x["loc"]))
        param = ".".join(str(p) for p in err["loc"] if not _is_type_tag(p)) or None
        raise bad_request(f"{param}: {err['msg']}" if param else err["msg"], param) from None
    for name, neutral in NEUTRAL.items():
        if name not in data or name in READ:
            continue
        allowed = neutral if isinstance(neutral, tuple) else (neutral,)
        if data[name] not in allowed:
            raise ApiError(400, f"{name} is not supported by this server (only {allowed[-1]!r})",
                           param=name, code="unsupported_parameter")
    return body

