"""OpenAI's dialect: ``/v1/chat/completions`` (tools, structured output, logprobs) and
``/v1/completions``, streamed or not; bodies shaped by engine.server.dialects.openai.chat_replies."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from engine.chat.messages import ROLES, Image, Message, ToolCall
from engine.chat.reasoning import from_effort
from engine.server import images, schema
from engine.server.core import Front
from engine.server.dialects.openai.chat_replies import OpenAIShaper
from engine.server.errors import bad_request
from engine.server.turn import Chat, Raw, reply_params, sampling
from engine.tools import Tool, ToolChoice


def _messages(body: schema.ChatCompletionRequest) -> list[Message]:
    if not body.messages:
        raise bad_request("messages must not be empty", "messages")
    out: list[Message] = []
    for i, m in enumerate(body.messages):
        role = "system" if m.role == "developer" else m.role
        if role not in ROLES:
            raise bad_request(f"messages[{i}].role: {m.role!r} is not supported (system, user, "
                              f"assistant, tool)", f"messages.{i}.role")
        if m.content is None and not (role == "assistant" and m.tool_calls):
            raise bad_request(f"messages[{i}].content is missing", f"messages.{i}.content")
        if role == "tool" and not m.tool_call_id:
            raise bad_request(f"messages[{i}]: a tool message needs tool_call_id",
                              f"messages.{i}.tool_call_id")
        calls = tuple(ToolCall(c.id, c.function.name, c.function.arguments)
                      for c in m.tool_calls or ()) if role == "assistant" else ()
        name = m.name if role == "tool" else None
        if role == "tool" and name is None:  # OpenAI's tool messages name no function: find it
            name = next((c.name for prev in out for c in prev.tool_calls
                         if c.id == m.tool_call_id), None)
        text, pictures = _content(m.content, i, role)
        out.append(Message(role, text, tool_calls=calls, images=pictures,
                           tool_call_id=m.tool_call_id if role == "tool" else None, name=name))
    images.check_count([p for m in out for p in m.images], "messages")
    return out


def _content(content: str | list[schema.TextPart] | None, i: int, role: str
             ) -> tuple[str, tuple[Image, ...]]:
    """A message's text and pictures (a user's ``image_url`` parts)."""
    if content is None or isinstance(content, str):
        return content or "", ()
    parts, pictures = [], []
    for j, part in enumerate(content):
        where = f"messages.{i}.content.{j}"
        if part.type == "image_url" and role == "user" and part.image_url is not None:
            pictures.append(images.from_url(part.image_url.url, where))
        elif part.type != "text" or part.text is None:
            raise bad_request(f"messages[{i}].content[{j}]: only text parts (and a user's "
                              "image_url parts) are supported", where)
        else:
            parts.append(part.text)
    return "\n".join(parts), tuple(pictures)


def response_grammar(body: schema._Request) -> tuple[Any, Any] | None:
    """The grammar a body asks for: response_format (OpenAI), grammar or json_schema
    (llama-server's fields)."""
    asked = [name for name in ("response_format", "grammar", "json_schema")
             if getattr(body, name) is not None
             and not (name == "response_format" and body.response_format is not None
                      and body.response_format.type == "text")]
    if len(asked) > 1:
        raise bad_request(f"give one of {' and '.join(asked)}", asked[1])
    if body.grammar is not None:
        return ("gbnf", body.grammar)
    if body.json_schema is not None:
        return ("json_schema", body.json_schema)
    f = body.response_format
    if f is None or f.type == "text":
        return None
    if f.type == "json_object":
        return ("json_schema", {"type": "object"})
    if f.json_schema is None or f.json_schema.schema_ is None:
        raise bad_request("response_format.json_schema.schema is missing",
                          "response_format.json_schema")
    return ("json_schema", f.json_schema.schema_)


def _tools(body: schema.ChatCompletionRequest) -> tuple[tuple[Tool, ...], ToolChoice]:
    tools = tuple(Tool(t.function.name, t.function.description or "",
                       t.function.parameters or {"type": "object", "properties": {}})
                  for t in body.tools or ())
    c = body.tool_choice
    if c is None:
        choice = ToolChoice("auto", parallel=body.parallel_tool_calls)
    elif isinstance(c, str):
        choice = ToolChoice(c, parallel=body.parallel_tool_calls)
    else:
        choice = ToolChoice("function", c.function.name, body.parallel_tool_calls)
    return tools, choice


def _logprobs(data: dict[str, Any]) -> int | None:
    r = reply_params(data, "openai")
    return r.top_logprobs if r.logprobs else None


# -- routes -----------------------------------------------------------------------------
async def chat_completions(request: Request) -> Response:
    front = Front.checked(request)
    data = await front.read_json(request)
    body = schema.parse(schema.ChatCompletionRequest, data)
    front.offer(body.model)
    tools, choice = _tools(body)
    messages = tuple(_messages(body))
    server = await front.pick(request, body.model)
    chat = Chat(messages, sampling(data, "openai", server.defaults), tools, choice,
                response_grammar(body), _logprobs(data), thinking=from_effort(body.reasoning_effort),
                param_names={"thinking": "reasoning_effort"})
    turn = await server.prepare(chat)
    shaper = OpenAIShaper("chat", server.model_id, server.model, body.include_usage,
                          server.exactness.fingerprint)
    return await server.answer(request, turn, shaper, body.stream)


async def completions(request: Request) -> Response:
    front = Front.checked(request)
    data = await front.read_json(request)
    body = schema.parse(schema.CompletionRequest, data)
    front.offer(body.model)
    prompt = _completion_prompt(body)
    server = await front.pick(request, body.model)
    raw = Raw(prompt, sampling(data, "openai", server.defaults), response_grammar(body),
              body.logprobs)
    turn = await server.prepare_raw(raw)
    shaper = OpenAIShaper("text", server.model_id, server.model, body.include_usage,
                          server.exactness.fingerprint)
    return await server.answer(request, turn, shaper, body.stream)


def _completion_prompt(body: schema.CompletionRequest) -> str | list[int]:
    """The body's prompt as engine.prompts.request.Raw takes it: token ids, or one string."""
    given = body.prompt
    if isinstance(given, list) and given and all(isinstance(t, int) for t in given):
        return [int(t) for t in given]
    if isinstance(given, list):
        if len(given) != 1 or not isinstance(given[0], str):
            raise bad_request("prompt: give one string (batches are not supported)", "prompt")
        given = given[0]
    return str(given)
