"""OpenAI's Responses dialect: ``POST /v1/responses``, streamed as its typed server-sent events
or not, a thin adapter over engine.server.turn. It is what the openai SDK's
``client.responses`` sends, and the API that coding agents built on OpenAI's stack speak.

Taken: ``input`` (a string, or items: messages with text parts, ``function_call`` and
``function_call_output``), ``instructions``, function ``tools`` and ``tool_choice``,
``text.format`` (json_schema, json_object), ``top_logprobs`` with ``include:
["message.output_text.logprobs"]``, ``previous_response_id`` (the conversation of a response
this server kept, engine.server.dialects.openai.response_store; ``store: false`` keeps none), and the sampling
fields under the parameter table's "responses" names (``max_output_tokens``, ``temperature``,
``top_p``). ``conversation`` and ``background`` are refused with a 400. Errors have OpenAI's
shape."""

from __future__ import annotations

from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response

from engine.chat.messages import Image, Message, ToolCall
from engine.chat.reasoning import EFFORTS, Thinking, from_effort
from engine.server import images, schema
from engine.server.core import Front, ServedModel
from engine.server.dialects.openai.response_store import ResponseStore
from engine.server.dialects.openai.responses_body import (
    INCLUDE,
    LOGPROBS,
    FunctionCallItem,
    InputImage,
    InputText,
    MessageItem,
    ReasoningItem,
    ResponsesNamedFunction,
    ResponsesRequest,
)
from engine.server.dialects.openai.responses_reply import ResponsesShaper
from engine.server.errors import ApiError, bad_request
from engine.server.turn import Chat, reply_params, sampling
from engine.tools import Tool, ToolChoice


# -- from the Responses API's terms to Duet's ----------------------------------------------
def _messages(body: ResponsesRequest, before: tuple[Message, ...]) -> tuple[Message, ...]:
    """The messages ``body.input`` adds to the conversation ``before`` it."""
    if isinstance(body.input, str):
        if not body.input:
            raise bad_request("input is empty", "input")
        return (Message("user", body.input),)
    if not body.input:
        raise bad_request("input: at least one item is required", "input")
    out = list(before)
    names = {c.id: c.name for m in before for c in m.tool_calls}  # call_id -> function name
    for i, item in enumerate(body.input):
        if isinstance(item, ReasoningItem):
            continue  # an earlier reply's reasoning: the model does not read it again
        if isinstance(item, MessageItem):
            role = "system" if item.role == "developer" else item.role
            out.append(Message(role, _text(item.content), images=_images(item, i)))
        elif isinstance(item, FunctionCallItem):
            # a reply's text and its calls are separate items here, one message in Duet's terms
            call = ToolCall(item.call_id, item.name, item.arguments)
            names[item.call_id] = item.name
            last = out[-1] if len(out) > len(before) else None
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
    if len(out) == len(before):
        raise bad_request("input: no message to answer (reasoning items alone are not read)",
                          "input")
    if out[-1].role == "assistant" and not out[-1].tool_calls:
        raise bad_request("input: the last item is the assistant's (continuing an assistant's "
                          "message is not supported)", "input")
    return tuple(out[len(before):])


def _text(content: str | list[InputText] | list[InputText | InputImage]) -> str:
    return content if isinstance(content, str) else \
        "\n".join(p.text for p in content if isinstance(p, InputText))


def _images(item: MessageItem, i: int) -> tuple[Image, ...]:
    """A user message's ``input_image`` parts (data URLs)."""
    if isinstance(item.content, str):
        return ()
    out = []
    for j, part in enumerate(item.content):
        if isinstance(part, InputImage):
            where = f"input.{i}.content.{j}"
            if item.role != "user":
                raise bad_request(f"{where}: only a user's message carries images", where)
            out.append(images.from_url(part.image_url, where))
    images.check_count(out, "input")
    return tuple(out)


def _tools(body: ResponsesRequest) -> tuple[tuple[Tool, ...], ToolChoice]:
    tools = tuple(Tool(t.name, t.description or "",
                       t.parameters or {"type": "object", "properties": {}})
                  for t in body.tools or ())
    c = body.tool_choice
    if isinstance(c, ResponsesNamedFunction):
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


def _refuse(body: ResponsesRequest) -> None:
    if body.conversation is not None:
        raise bad_request("conversation is not supported: give previous_response_id, or send "
                          "the whole conversation in input", "conversation")
    if body.background:
        raise bad_request("background is not supported: ask with stream true to follow a long "
                          "reply", "background")
    for i, name in enumerate(body.include or ()):
        if name not in INCLUDE:
            raise bad_request(f"include[{i}]: {name!r} is not supported (only "
                              f"{', '.join(sorted(INCLUDE))})", f"include.{i}")


def _thinking(body: ResponsesRequest) -> Thinking:
    """``reasoning.effort`` (engine.chat.reasoning); the rest of ``reasoning`` (summary) has no
    effect: the reasoning comes whole."""
    effort = (body.reasoning or {}).get("effort")
    if effort is not None and effort not in EFFORTS:
        raise bad_request(f"reasoning.effort: {effort!r} is not one of {', '.join(EFFORTS)}",
                          "reasoning.effort")
    return from_effort(effort)


def _before(store: ResponseStore, body: ResponsesRequest) -> tuple[Message, ...]:
    """The conversation up to ``previous_response_id`` (its instructions are not carried over,
    as OpenAI has it)."""
    if body.previous_response_id is None:
        return ()
    before = store.conversation(body.previous_response_id)
    if before is None:
        raise ApiError(404, f"the response {body.previous_response_id!r} is not kept here (it was "
                            "stored with store false, or before the server started, or pushed "
                            "out); send the whole conversation in input",
                       param="previous_response_id", code="previous_response_not_found")
    return before


async def _chat(front: Front, request: Request, store: ResponseStore, data: Any
                ) -> tuple[ServedModel, ResponsesRequest, Chat, tuple[Message, ...]]:
    """The model's server, the request, its chat, and the messages its input adds (what is kept
    with its reply)."""
    body = schema.parse(ResponsesRequest, data)
    front.offer(body.model)
    _refuse(body)
    before = _before(store, body)
    new = _messages(body, before)
    tools, choice = _tools(body)
    server = await front.pick(request, body.model)
    reply = reply_params(data, "responses")
    logprobs = reply.top_logprobs if LOGPROBS in (body.include or ()) else None
    system = (Message("system", body.instructions),) if body.instructions else ()
    return server, body, Chat(system + before + new, sampling(data, "responses", server.defaults),
                      tools, choice, _response_format(body), logprobs,
                      param_names={"messages": "input", "response_format": "text.format",
                                   "thinking": "reasoning.effort"},
                      thinking=_thinking(body)), new


# -- the route ----------------------------------------------------------------------------
async def responses(request: Request) -> Response:
    front = Front.checked(request)
    data = await front.read_json(request)
    store: ResponseStore = request.app.state.responses
    server, body, chat, new = await _chat(front, request, store, data)
    turn = await server.prepare(chat)
    shaper = ResponsesShaper(server, body, turn, store if body.store is not False else None, new)
    return await server.answer(request, turn, shaper, body.stream)


