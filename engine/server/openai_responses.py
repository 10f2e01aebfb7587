"""OpenAI's Responses dialect: ``POST /v1/responses``, streamed as its typed server-sent events
or not, a thin adapter over engine.server.turn. It is what the openai SDK's
``client.responses`` sends, and the API that coding agents built on OpenAI's stack speak.

Taken: ``input`` (a string, or items: messages with text parts, ``function_call`` and
``function_call_output``), ``instructions``, function ``tools`` and ``tool_choice``,
``text.format`` (json_schema, json_object), ``top_logprobs`` with ``include:
["message.output_text.logprobs"]``, and the sampling fields under the parameter table's
"responses" names (``max_output_tokens``, ``temperature``, ``top_p``). Duet keeps no responses:
``store`` is answered false, and ``previous_response_id``, ``conversation`` and ``background``
are refused with a 400 that says to send the whole conversation, as agents that run with
``store: false`` do. Errors have OpenAI's shape."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Annotated, Any, AsyncIterator, Literal

from pydantic import Discriminator, Field, Tag
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from engine.chat import Message, ToolCall
from engine.server import schema
from engine.server.core import DuetServer, Gone
from engine.server.errors import ApiError, bad_request
from engine.server.responses import Shaper as ChatShaper
from engine.server.turn import (Call, Chat, End, Piece, Text, Turn, collect, pieces,
                                reply_params, sampling)
from engine.tools import Tool, ToolChoice

log = logging.getLogger(__name__)

LOGPROBS = "message.output_text.logprobs"
INCLUDE = frozenset({LOGPROBS, "reasoning.encrypted_content"})  # the second: nothing to include


# -- request bodies -----------------------------------------------------------------------
class InputText(schema._Body):
    type: Literal["input_text", "output_text", "text"]
    text: str


class MessageItem(schema._Body):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[InputText]


class FunctionCallItem(schema._Body):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str  # JSON text


class FunctionCallOutputItem(schema._Body):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[InputText]


def _item_kind(item: Any) -> str | None:
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", None)
    return kind if kind in ("message", "function_call", "function_call_output") else None


Item = Annotated[Annotated[MessageItem, Tag("message")]
                 | Annotated[FunctionCallItem, Tag("function_call")]
                 | Annotated[FunctionCallOutputItem, Tag("function_call_output")],
                 Discriminator(_item_kind, custom_error_type="item_type",
                               custom_error_message="an input item is a message, a function_call "
                                                    "or a function_call_output")]


class FunctionTool(schema._Body):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamedFunction(schema._Body):
    type: Literal["function"]
    name: str


class Format(schema._Body):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(schema._Body):
    format: Format | None = None
    verbosity: str | None = None


class ResponsesRequest(schema._Body):
    """What ``/v1/responses`` takes; the sampling fields (max_output_tokens, temperature, top_p)
    and top_logprobs are rows of the parameter table, read by ``engine.params.read``."""

    model: str | None = None
    input: str | list[Item] = Field(json_schema_extra={"minItems": 1})
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    include: list[str] | None = None
    stream: bool = False
    store: bool | None = None
    metadata: dict[str, str] | None = None
    reasoning: dict[str, Any] | None = None  # these models answer at once: nothing to set
    previous_response_id: str | None = Field(default=None, json_schema_extra={"type": "null"})
    conversation: Any = Field(default=None, json_schema_extra={"type": "null"})
    background: bool = Field(default=False, json_schema_extra={"enum": [False]})


# -- from the Responses API's terms to Duet's ----------------------------------------------
def _messages(body: ResponsesRequest) -> list[Message]:
    out: list[Message] = []
    if body.instructions:
        out.append(Message("system", body.instructions))
    if isinstance(body.input, str):
        if not body.input:
            raise bad_request("input is empty", "input")
        return out + [Message("user", body.input)]
    if not body.input:
        raise bad_request("input: at least one item is required", "input")
    names: dict[str, str] = {}  # call_id -> function name
    for i, item in enumerate(body.input):
        if isinstance(item, MessageItem):
            role = "system" if item.role == "developer" else item.role
            out.append(Message(role, _text(item.content)))
        elif isinstance(item, FunctionCallItem):
            # a reply's text and its calls are separate items here, one message in Duet's terms
            call = ToolCall(item.call_id, item.name, item.arguments)
            names[item.call_id] = item.name
            last = out[-1] if out else None
            if last is not None and last.role == "assistant":
                out[-1] = Message("assistant", last.content, tool_calls=(*last.tool_calls, call))
            else:
                out.append(Message("assistant", "", tool_calls=(call,)))
        else:
            if item.call_id not in names:
                raise bad_request(f"input[{i}]: the function_call_output's call_id "
                                  f"{item.call_id!r} answers no function_call before it",
                                  f"input.{i}.call_id")
            out.append(Message("tool", _text(item.output), tool_call_id=item.call_id,
                               name=names[item.call_id]))
    if out[-1].role == "assistant" and not out[-1].tool_calls:
        raise bad_request("input: the last item is the assistant's (continuing an assistant's "
                          "message is not supported)", "input")
    return out


def _text(content: str | list[InputText]) -> str:
    return content if isinstance(content, str) else "\n".join(p.text for p in content)


def _tools(body: ResponsesRequest) -> tuple[tuple[Tool, ...], ToolChoice]:
    tools = tuple(Tool(t.name, t.description or "",
                       t.parameters or {"type": "object", "properties": {}})
                  for t in body.tools or ())
    c = body.tool_choice
    if isinstance(c, NamedFunction):
        return tools, ToolChoice("function", c.name, body.parallel_tool_calls)
    return tools, ToolChoice(c or "auto", parallel=body.parallel_tool_calls)


def _response_format(body: ResponsesRequest) -> tuple[Literal["json_schema"], Any] | None:
    f = body.text.format if body.text is not None else None
    if f is None or f.type == "text":
        return None
    if f.type == "json_object":
        return ("json_schema", {"type": "object"})
    if f.schema_ is None:
        raise bad_request("text.format.schema is missing", "text.format.schema")
    return ("json_schema", f.schema_)


def _refuse_state(body: ResponsesRequest) -> None:
    """Duet keeps no responses: a request that points at one is refused, not half-answered."""
    for name in ("previous_response_id", "conversation"):
        if getattr(body, name) is not None:
            raise bad_request(f"{name} is not supported: this server keeps no responses (store "
                              "is false); send the whole conversation in input", name)
    if body.background:
        raise bad_request("background is not supported: ask with stream true to follow a long "
                          "reply", "background")
    for i, name in enumerate(body.include or ()):
        if name not in INCLUDE:
            raise bad_request(f"include[{i}]: {name!r} is not supported (only "
                              f"{', '.join(sorted(INCLUDE))})", f"include.{i}")


def _chat(server: DuetServer, data: Any) -> tuple[ResponsesRequest, Chat]:
    body = schema.parse(ResponsesRequest, data)
    server.check_model(body.model)
    _refuse_state(body)
    tools, choice = _tools(body)
    reply = reply_params(data, "responses")
    logprobs = reply.top_logprobs if LOGPROBS in (body.include or ()) else None
    return body, Chat(tuple(_messages(body)), sampling(data, "responses", server.defaults),
                      tools, choice, _response_format(body), logprobs,
                      param_names={"messages": "input", "response_format": "text.format"})


# -- the route ----------------------------------------------------------------------------
async def responses(request: Request) -> Response:
    server: DuetServer = request.app.state.duet
    server.check_auth(request)
    data = await server.read_json(request)
    body, chat = _chat(server, data)
    turn = await server.prepare(chat)
    shaper = Shaper(server, body, turn)
    stream = pieces(await server.run(request, turn), turn)
    if body.stream:
        return StreamingResponse(_events(stream, shaper), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    try:
        text, calls, tokens, end = await collect(stream)
    except Gone:
        return Response(status_code=499)
    return JSONResponse(shaper.full(text, calls, tokens, end))


# -- replies ------------------------------------------------------------------------------
class Shaper:
    """The response object and stream events of one reply, under one response id."""

    def __init__(self, server: DuetServer, body: ResponsesRequest, turn: Turn) -> None:
        self.id = "resp_" + uuid.uuid4().hex
        self.created = int(time.time())
        self.model_id = server.config.model_id
        self.body = body
        self.turn = turn
        self.tokens = ChatShaper("chat", self.model_id, server.model)  # logprob entries
        self.output: list[dict] = []  # the items so far
        self.seq = 0
        self.text: list[str] = []  # of the message item being streamed
        self.logprobs: list[dict] = []
        self.pending = ""  # white space that opens no message before a call

    def response(self, status: str, end: End | None = None) -> dict:
        b = self.body
        fmt = (b.text.format.model_dump(by_alias=True, exclude_none=True)
               if b.text is not None and b.text.format is not None else {"type": "text"})
        choice = (b.tool_choice.model_dump() if isinstance(b.tool_choice, NamedFunction)
                  else b.tool_choice or "auto")
        s = self.turn.sampling
        incomplete = None
        if end is not None and end.finish == "length":
            status, incomplete = "incomplete", {"reason": "max_output_tokens"}
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": None, "incomplete_details": incomplete, "instructions": b.instructions,
            "max_output_tokens": s.max_tokens, "model": self.model_id,
            "output": list(self.output), "parallel_tool_calls": b.parallel_tool_calls,
            "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
            "store": False, "temperature": s.temperature, "top_p": s.top_p,
            "text": {"format": fmt}, "tool_choice": choice,
            "tools": [t.model_dump(exclude_none=True) for t in b.tools or ()],
            "truncation": "disabled", "metadata": b.metadata or {},
            "usage": _usage(end) if end is not None else None,
        }

    def full(self, text: str, calls: list[ToolCall], tokens: list, end: End) -> dict:
        if text.strip() or tokens or not calls:
            self.output.append(self._message(text, [self.tokens.entry(t) for t in tokens]))
        self.output += [_call_item(c) for c in calls]
        return self.response("completed", end)

    # -- the stream -------------------------------------------------------------------------
    def event(self, name: str, data: dict) -> bytes:
        payload = json.dumps({"type": name, **data, "sequence_number": self.seq},
                             ensure_ascii=False)
        self.seq += 1
        return f"event: {name}\ndata: {payload}\n\n".encode("utf-8")

    def start(self) -> list[bytes]:
        head = self.response("in_progress")
        return [self.event("response.created", {"response": head}),
                self.event("response.in_progress", {"response": head})]

    def add_text(self, piece: Text) -> list[bytes]:
        entries = [self.tokens.entry(t) for t in piece.tokens]
        if not self._open() and not piece.text.strip() and not entries:
            self.pending += piece.text
            return []
        out = [] if self._open() else self._open_message()
        text, self.pending = self.pending + piece.text, ""
        self.text.append(text)
        self.logprobs += entries
        if not text and not entries:
            return out
        item = self.output[-1]
        return out + [self.event("response.output_text.delta", {
            "item_id": item["id"], "output_index": len(self.output) - 1, "content_index": 0,
            "delta": text, "logprobs": entries})]

    def add_call(self, call: ToolCall) -> list[bytes]:
        out, self.pending = self._close(), ""
        item = _call_item(call)
        index = len(self.output)
        self.output.append(item)
        where = {"item_id": item["id"], "output_index": index}
        return out + [
            self.event("response.output_item.added", {"output_index": index, "item": {
                **item, "arguments": "", "status": "in_progress"}}),
            self.event("response.function_call_arguments.delta", {**where,
                                                                  "delta": call.arguments}),
            self.event("response.function_call_arguments.done", {**where, "name": call.name,
                                                                 "arguments": call.arguments}),
            self.event("response.output_item.done", {"output_index": index, "item": item})]

    def finish(self, end: End) -> list[bytes]:
        out = self._close()
        if not self.output:  # an empty reply: one message, as the whole body has
            out += self._open_message()
            self.text, self.pending = [self.pending], ""
            out += self._close()
        body = self.response("completed", end)
        name = "response.completed" if body["status"] == "completed" else "response.incomplete"
        return out + [self.event(name, {"response": body})]

    def _open(self) -> bool:
        return bool(self.output) and self.output[-1]["type"] == "message" and \
            self.output[-1]["status"] == "in_progress"

    def _open_message(self) -> list[bytes]:
        item = {**self._message("", []), "status": "in_progress", "content": []}
        self.output.append(item)
        self.text, self.logprobs = [], []
        index = len(self.output) - 1
        return [self.event("response.output_item.added", {"output_index": index, "item": item}),
                self.event("response.content_part.added", {
                    "item_id": item["id"], "output_index": index, "content_index": 0,
                    "part": _part("", [])})]

    def _close(self) -> list[bytes]:
        if not self._open():
            return []
        index = len(self.output) - 1
        text = "".join(self.text)
        item = self.output[index] = self._message(text, self.logprobs, self.output[index]["id"])
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return [self.event("response.output_text.done", {**where, "text": text,
                                                         "logprobs": self.logprobs}),
                self.event("response.content_part.done", {**where,
                                                          "part": item["content"][0]}),
                self.event("response.output_item.done", {"output_index": index, "item": item})]

    @staticmethod
    def _message(text: str, logprobs: list[dict], item_id: str | None = None) -> dict:
        return {"type": "message", "id": item_id or "msg_" + uuid.uuid4().hex,
                "status": "completed", "role": "assistant", "content": [_part(text, logprobs)]}


def _part(text: str, logprobs: list[dict]) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def _call_item(call: ToolCall) -> dict:
    return {"type": "function_call", "id": "fc_" + call.id.removeprefix("call_"),
            "call_id": call.id, "name": call.name, "arguments": call.arguments,
            "status": "completed"}


def _usage(end: End) -> dict:
    s = end.done.stats
    return {"input_tokens": s.n_prompt_tokens, "output_tokens": s.n_tokens,
            "total_tokens": s.n_prompt_tokens + s.n_tokens,
            "input_tokens_details": {"cached_tokens": s.n_cached_tokens, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}


async def _events(stream: AsyncIterator[Piece], shaper: Shaper) -> AsyncIterator[bytes]:
    try:
        for e in shaper.start():
            yield e
        async for p in stream:
            if isinstance(p, Text):
                for e in shaper.add_text(p):
                    yield e
            elif isinstance(p, Call):
                for e in shaper.add_call(p.call):
                    yield e
            elif isinstance(p, End):
                for e in shaper.finish(p):
                    yield e
    except ApiError as e:
        yield shaper.event("error", {"code": e.code, "message": e.message, "param": e.param})
    except Gone:
        log.info("a client disconnected; its generation is cancelled")
