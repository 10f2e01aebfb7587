"""The body ``/v1/responses`` takes (OpenAI's Responses API), as pydantic models: the request
handler (engine.server.dialects.openai.responses) and the reply's shape (openai_responses_reply) both
read it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from engine.server import schema

LOGPROBS = "message.output_text.logprobs"
INCLUDE = frozenset({LOGPROBS, "reasoning.encrypted_content"})  # the second: nothing to include


# -- request bodies -----------------------------------------------------------------------
class InputText(schema._Body):
    type: Literal["input_text", "output_text", "text"]
    text: str


class InputImage(schema._Body):
    """A picture: ``image_url`` a data URL (the server fetches no http(s) URL)."""

    type: Literal["input_image"]
    image_url: str | None = None
    detail: str | None = None


class MessageItem(schema._Body):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[Annotated[InputText | InputImage, Field(discriminator="type")]]


class FunctionCallItem(schema._Body):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str  # JSON text


class FunctionCallOutputItem(schema._Body):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[InputText]


class ReasoningItem(schema._Body):
    """An earlier reply's reasoning, sent back: not shown to the model again."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] | None = None
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None
    status: str | None = None


def _item_kind(item: Any) -> str | None:
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", None)
    return kind if kind in ("message", "function_call", "function_call_output",
                            "reasoning") else None


Item = Annotated[Annotated[MessageItem, Tag("message")]
                 | Annotated[FunctionCallItem, Tag("function_call")]
                 | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
                 | Annotated[ReasoningItem, Tag("reasoning")],
                 Discriminator(_item_kind, custom_error_type="item_type",
                               custom_error_message="an input item is a message, a function_call, "
                                                    "a function_call_output or a reasoning item")]


class ResponsesTool(schema._Body):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ResponsesNamedFunction(schema._Body):
    type: Literal["function"]
    name: str


class ResponsesFormat(schema._Body):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(schema._Body):
    format: ResponsesFormat | None = None
    verbosity: str | None = None


class ResponsesRequest(schema._Body):
    """What ``/v1/responses`` takes; the sampling fields (max_output_tokens, temperature, top_p)
    and top_logprobs are rows of the parameter table, read by ``engine.params.read``."""

    model: str | None = None
    input: str | list[Item] = Field(json_schema_extra={"minItems": 1})
    instructions: str | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | ResponsesNamedFunction | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    include: list[str] | None = None
    stream: bool = False
    store: bool | None = None
    metadata: dict[str, str] | None = None
    reasoning: dict[str, Any] | None = None  # effort: a reasoning model's (engine.chat.reasoning)
    previous_response_id: str | None = None
    conversation: Any = Field(default=None, json_schema_extra={"type": "null"})
    background: bool = Field(default=False, json_schema_extra={"enum": [False]})
