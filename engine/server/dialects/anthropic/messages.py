"""Anthropic's Messages dialect: ``POST /v1/messages`` (streamed as its server-sent events or
not) and ``/v1/messages/count_tokens``, a thin adapter over engine.server.turn: system, text,
tool_use and tool_result blocks, tools and tool_choice, structured output
(``output_config.format``), and the sampling fields through the parameter table's "anthropic"
names (max_tokens, stop_sequences, temperature, top_p, top_k; the current SDK sends the last
three in ``extra_body``). Requests authenticate with ``x-api-key`` or ``Authorization:
Bearer``; every refusal on these routes is answered as Anthropic answers it
(``{"type": "error", "error": {"type", "message"}}``)."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, Literal, cast

from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.chat.messages import Image, Message, ToolCall
from engine.chat.reasoning import OFF, Thinking
from engine.decode.sampling import SamplingParams
from engine.events import Done, Token
from engine.server import images, schema
from engine.server.core import Front, ServedModel
from engine.server.errors import ApiError, bad_request
from engine.server.turn import Chat, End, PreparedTurn, Text, client_turn, sampling
from engine.tools import Tool, ToolChoice

STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               503: "overloaded_error"}


# -- request bodies -----------------------------------------------------------------------
class TextBlock(schema._Body):
    type: Literal["text"]
    text: str


class ToolUseBlock(schema._Body):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(schema._Body):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] = ""
    is_error: bool = False


class ThinkingBlock(schema._Body):
    """An earlier reply's thinking, sent back: not shown to the model again."""

    type: Literal["thinking", "redacted_thinking"]
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None


class ImageSource(schema._Body):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class ImageBlock(schema._Body):
    type: Literal["image"]
    source: ImageSource


Block = Annotated[TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock,
                  Field(discriminator="type")]


class AnthropicMessage(schema._Body):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class AnthropicTool(schema._Body):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None


class ToolChoiceBody(schema._Body):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class ThinkingConfig(schema._Body):
    type: Literal["disabled", "enabled", "adaptive"]
    budget_tokens: int | None = Field(None, ge=1)

    def asked(self) -> Thinking:
        if self.type == "disabled":
            return OFF
        return Thinking(on=True, budget=self.budget_tokens if self.type == "enabled" else None)


class JsonFormat(schema._Body):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(schema._Body):
    format: JsonFormat | None = None
    effort: str | None = None  # how long a thinking model thinks: these models answer at once


class CountRequest(schema._Body):
    """What ``count_tokens`` takes; the sampling fields (max_tokens, temperature, top_p, top_k,
    stop_sequences) are rows of the parameter table, read by ``engine.params.read``."""

    model: str
    messages: list[AnthropicMessage] = Field(json_schema_extra={"minItems": 1})
    system: str | list[TextBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: ToolChoiceBody | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None  # structured output: a JSON schema


class MessagesRequest(CountRequest):
    max_tokens: int  # required by Anthropic's API (its range: the parameter table's row)
    stream: bool = False
    metadata: dict[str, Any] | None = None


# -- from Anthropic's terms to Duet's -----------------------------------------------------
def _messages(body: CountRequest) -> list[Message]:
    if not body.messages:
        raise bad_request("messages: at least one message is required", "messages")
    if body.messages[-1].role == "assistant":
        raise bad_request("messages: the last message must be the user's (continuing an "
                          "assistant's message is not supported)", "messages")
    out = []
    if body.system is not None:
        out.append(Message("system", _text(body.system)))
    names: dict[str, str] = {}  # tool_use id -> function name
    for i, m in enumerate(body.messages):
        if isinstance(m.content, str):
            out.append(Message(m.role, m.content))
            continue
        text: list[str] = []
        calls: list[ToolCall] = []
        pictures: list[Image] = []
        for j, block in enumerate(m.content):
            where = f"messages.{i}.content.{j}"
            if isinstance(block, TextBlock):
                text.append(block.text)
            elif isinstance(block, ImageBlock):
                pictures.append(_image(block, m.role, where))
            elif isinstance(block, ThinkingBlock):
                continue  # an earlier reply's thinking: the model does not read it again
            elif isinstance(block, ToolUseBlock):
                if m.role != "assistant":
                    raise bad_request(f"{where}: tool_use blocks belong to assistant messages",
                                      where)
                calls.append(ToolCall(block.id, block.name, json.dumps(block.input)))
                names[block.id] = block.name
            else:
                if m.role != "user":
                    raise bad_request(f"{where}: tool_result blocks belong to user messages", where)
                if text or pictures:
                    out.append(Message("user", "\n".join(text), images=tuple(pictures)))
                    text, pictures = [], []
                result = _text(block.content)
                out.append(Message("tool", f"Error: {result}" if block.is_error else result,
                                   tool_call_id=block.tool_use_id,
                                   name=names.get(block.tool_use_id)))
        if text or calls or pictures:
            out.append(Message(m.role, "\n".join(text), tool_calls=tuple(calls), images=tuple(pictures)))
    images.check_count([p for m in out for p in m.images], "messages")
    return out


def _image(block: ImageBlock, role: str, where: str) -> Image:
    """An ``image`` block of a user's message: base64 data (the server fetches no URL)."""
    if role != "user":
        raise bad_request(f"{where}: only a user's message carries images", where)
    if block.source.type != "base64":
        raise bad_request(f"{where}: this server fetches no image URLs; send the picture as "
                          "base64 data", where, "image_url_not_fetched")
    return images.from_base64(block.source.data, where)


def _text(content: str | list[TextBlock]) -> str:
    return content if isinstance(content, str) else "\n".join(b.text for b in content)


def _tools(body: CountRequest) -> tuple[tuple[Tool, ...], ToolChoice]:
    tools = tuple(Tool(t.name, t.description or "", t.input_schema) for t in body.tools or ())
    c = body.tool_choice
    if c is None:
        return tools, ToolChoice()
    parallel = not c.disable_parallel_tool_use
    if c.type == "tool":
        if not c.name:
            raise bad_request("tool_choice.name is required when its type is tool",
                              "tool_choice.name")
        return tools, ToolChoice("function", c.name, parallel)
    mode = cast(Literal["auto", "none", "required", "function"], {"any": "required"}.get(c.type, c.type))
    return tools, ToolChoice(mode, parallel=parallel)


async def _chat(front: Front, request: Request, data: Any,
                cls: type[CountRequest]) -> tuple[ServedModel, CountRequest, Chat]:
    body = schema.parse(cls, data)
    front.offer(body.model)
    tools, choice = _tools(body)
    messages = tuple(_messages(body))
    server = await front.pick(request, body.model)
    params = sampling(data, "anthropic", server.defaults)
    fmt = body.output_config.format if body.output_config is not None else None
    return server, body, Chat(messages, params, tools, choice,
                      ("json_schema", fmt.schema_) if fmt is not None else None,
                      param_names={"response_format": "output_config.format"},
                      thinking=body.thinking.asked() if body.thinking is not None else Thinking())


# -- routes -------------------------------------------------------------------------------
async def messages(request: Request) -> Response:
    front = Front.checked(request, header="x-api-key")
    data = await front.read_json(request)
    server, body, chat = await _chat(front, request, data, MessagesRequest)
    turn = await server.prepare(chat)
    shaper = AnthropicShaper(server, turn)
    streamed = isinstance(body, MessagesRequest) and body.stream
    return await server.answer(request, turn, shaper, streamed)


async def count_tokens(request: Request) -> Response:
    front = Front.checked(request, header="x-api-key")
    data = await front.read_json(request)
    server, _, chat = await _chat(front, request, data, CountRequest)
    turn = await run_in_threadpool(client_turn, server.model, chat)
    return JSONResponse({"input_tokens": len(turn.prompt)})


# -- replies ------------------------------------------------------------------------------
class AnthropicShaper:
    """The bodies and events of one reply, under one message id."""

    media_type = "text/event-stream"

    def __init__(self, server: ServedModel, turn: PreparedTurn) -> None:
        self.id = "msg_" + uuid.uuid4().hex[:24]
        self.model_id = server.model_id
        self.model = server.model
        self.turn = turn
        self.index = 0  # the next content block's index
        self.open: str | None = None  # the type of the block being streamed
        self.kinds: list[str] = []  # the types of the blocks so far

    def head(self) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model_id}

    def stop(self, end: End) -> dict:
        reason = STOP_REASONS.get(end.finish, "end_turn")
        matched = stop_sequence(self.model, end.done, self.turn.sampling)
        return {"stop_reason": "stop_sequence" if matched is not None else reason,
                "stop_sequence": matched}

    def usage(self, done: Done | None = None) -> dict:
        return {"input_tokens": len(self.turn.prompt),
                "output_tokens": done.stats.n_completion if done is not None else 0}

    def whole(self, text: str, calls: list[ToolCall], tokens: list[Token], end: End,
              reasoning: str = "") -> dict:
        content: list[dict] = [_thinking(reasoning)] if reasoning else []
        content += [{"type": "text", "text": text}] if text or not calls else []
        content += [_tool_use(c) for c in calls]
        return {**self.head(), "content": content, **self.stop(end), "usage": self.usage(end.done)}

    # -- the stream (engine.server.shape.Shaper) ---------------------------------------------
    def start(self) -> list[bytes]:
        message = {**self.head(), "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": self.usage()}
        return [event("message_start", {"message": message})]

    def text(self, piece: Text) -> list[bytes]:
        if not piece.text:  # log-probabilities alone: Anthropic's messages carry none
            return []
        if piece.thinking:
            out = [] if self.open == "thinking" else self._open({**_thinking(""), "signature": ""})
            delta = {"type": "thinking_delta", "thinking": piece.text}
            return out + [event("content_block_delta", {"index": self.index, "delta": delta})]
        out = [] if self.open == "text" else self._open({"type": "text", "text": ""})
        delta = {"type": "text_delta", "text": piece.text}
        return out + [event("content_block_delta", {"index": self.index, "delta": delta})]

    def call(self, call: ToolCall) -> list[bytes]:
        block = {**_tool_use(call), "input": {}}
        delta = {"type": "input_json_delta", "partial_json": call.arguments}
        return self._open(block) + [event("content_block_delta",
                                          {"index": self.index, "delta": delta})] + self._close()

    def end(self, end: End) -> list[bytes]:
        out = self._close()
        if self.index == 0 or self.kinds == ["thinking"]:  # no answer: one empty text block,
            # as the whole body has
            out += self._open({"type": "text", "text": ""}) + self._close()
        out.append(event("message_delta", {"delta": self.stop(end), "usage": self.usage(end.done)}))
        return out + [event("message_stop", {})]

    def failed(self, error: ApiError) -> list[bytes]:
        return [event("error", error_body(error))]

    def _open(self, block: dict) -> list[bytes]:
        out = self._close()
        self.open = block["type"]
        self.kinds.append(block["type"])
        return out + [event("content_block_start", {"index": self.index, "content_block": block})]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":  # the SDK's thinking blocks carry a signature
            out.append(event("content_block_delta", {"index": self.index, "delta": {
                "type": "signature_delta", "signature": SIGNATURE}}))
        self.open = None
        self.index += 1
        return out + [event("content_block_stop", {"index": self.index - 1})]


# Anthropic signs its thinking so that it can be sent back untouched; Duet's is not signed (a
# thinking block sent back is accepted and left out of the prompt whatever it says).
SIGNATURE = "duet-unsigned"


def _thinking(text: str) -> dict:
    return {"type": "thinking", "thinking": text, "signature": SIGNATURE}


def _tool_use(call: ToolCall) -> dict:
    return {"type": "tool_use", "id": call.id, "name": call.name,
            "input": call.parsed_arguments()}


def stop_sequence(model: Any, done: Done, params: SamplingParams) -> str | None:
    """The stop string that ended the reply, or None (it ended otherwise). The reply's text
    ends where the stop string began, so the decoded tokens go on with it."""
    ids = done.token_ids
    if done.reason != "stop" or not params.stop or not ids or model.is_eog(ids[-1]):
        return None
    rest = model.detokenize(ids)[len(done.text):]
    return next((s for s in params.stop if s and rest.startswith(s)), None)


def event(name: str, data: dict) -> bytes:
    payload = json.dumps({"type": name, **data}, ensure_ascii=False)
    return f"event: {name}\ndata: {payload}\n\n".encode()


# -- errors -------------------------------------------------------------------------------
def error_body(e: ApiError) -> dict:
    kind = ERROR_TYPES.get(e.status, "api_error" if e.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": e.message}}


def error_response(e: ApiError) -> Response:
    return JSONResponse(error_body(e), status_code=e.status, headers=e.headers)
