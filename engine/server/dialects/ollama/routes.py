"""Ollama's dialect: ``/api/chat`` and ``/api/generate`` (streamed as NDJSON by default, as
Ollama does), a thin adapter over engine.server.turn; the model routes (tags, show, ps, version)
are in engine.server.dialects.ollama.models. Errors are answered as Ollama answers them:
``{"error": "..."}`` with the status code.

Ollama's ``options`` are read through the parameter table's "ollama" names. Options that tune
how Ollama loads a model (num_gpu, num_thread, use_mmap, ...) are accepted and have no effect
on a reply, as for a model Ollama already loaded; ``num_ctx`` is accepted up to the server's
context. Sampling options Duet does not have are refused unless they hold their neutral value.
``keep_alive`` is accepted: the model stays loaded while the server runs."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine import params
from engine.chat.messages import Message, ToolCall
from engine.chat.reasoning import OFF, Thinking, from_effort
from engine.decode.sampling import SamplingParams
from engine.events import Token
from engine.runtime.pool import PoolError
from engine.server import images, schema
from engine.server.core import Front, ServedModel
from engine.server.dialects.openai.chat_replies import chat_logprobs
from engine.server.errors import ApiError, bad_request
from engine.server.turn import Chat, End, Raw, Text, reply_params
from engine.tools import Tool

# Options for how Ollama loads and runs a model: no effect on the reply of a loaded one.
LOAD_OPTIONS = frozenset({"numa", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv",
                          "logits_all", "vocab_only", "use_mmap", "use_mlock", "embedding_only",
                          "num_thread", "num_keep"})
# Sampling options Duet does not have: accepted only at their neutral value. Mirostat's tau and
# eta apply only with mirostat on; penalize_newline has no effect in current Ollama either.
NEUTRAL_OPTIONS: dict[str, tuple[Any, ...]] = {"typical_p": (1, 1.0), "tfs_z": (1, 1.0),
                                               "mirostat": (0,)}
NO_EFFECT = frozenset({"mirostat_tau", "mirostat_eta", "penalize_newline"})
READ = frozenset(n for r in params.table(SamplingParams) for n in r.spec.api.get("ollama", ()))
NO_LIMIT = int(params.row(SamplingParams, "max_tokens").spec.maximum or 0)  # cut to the context
NAMES = {"response_format": "format", "thinking": "think"}  # Duet's field names -> Ollama's


# -- request bodies -----------------------------------------------------------------------
NONE: dict[str, Any] = {"maxLength": 0, "maxItems": 0}  # accepted empty only (the document says so)


class OllamaFunction(schema._Body):
    name: str
    arguments: dict[str, Any]
    index: int | None = None


class OllamaToolCall(schema._Body):
    function: OllamaFunction
    id: str | None = None


class OllamaMessage(schema._Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    images: list[str] | None = Field(None, json_schema_extra=NONE)
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    thinking: str | None = None  # an earlier reply's reasoning: not shown to the model again


class OllamaTool(schema._Body):
    type: Literal["function"] = "function"
    function: schema.FunctionSpec


class _OllamaRequest(schema._Body):
    model: str
    stream: bool = True
    format: Literal["", "json"] | dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    keep_alive: float | str | None = None
    think: bool | Literal["low", "medium", "high"] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class OllamaChatRequest(_OllamaRequest):
    messages: list[OllamaMessage] = []
    tools: list[OllamaTool] | None = None


class OllamaGenerateRequest(_OllamaRequest):
    prompt: str = ""
    system: str | None = None
    raw: bool = False
    suffix: str | None = Field(None, json_schema_extra=NONE)
    template: str | None = Field(None, json_schema_extra=NONE)
    context: list[int] | None = Field(None, json_schema_extra=NONE)
    images: list[str] | None = Field(None, json_schema_extra=NONE)


# -- from Ollama's terms to Duet's --------------------------------------------------------
def model_name(name: str) -> str:
    """Ollama's names carry a tag; ``:latest`` is the one a bare name means."""
    return name.removesuffix(":latest")


def keep_alive(value: float | str | None) -> float | None:
    """Ollama's ``keep_alive`` in seconds: a number of seconds or a duration ("5m", "1h30m",
    "90s"); negative: for ever (-1); None: the server's time to live."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        parts = re.fullmatch(r"(-?)((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)", text)
        if parts is None:
            raise bad_request(f"keep_alive: {value!r} is not a duration (such as \"5m\", "
                              "\"1h\", 300, 0 or -1)", "keep_alive")
        seconds = sum(float(n) * UNITS[u] for n, u in
                      re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", parts.group(2)))
        return -seconds if parts.group(1) else seconds
    if value != value or value in (float("inf"), float("-inf")):
        raise bad_request("keep_alive must be a finite number of seconds", "keep_alive")
    return float(value)


UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


async def _common(front: Front, request: Request, body: _OllamaRequest,
                  data: dict) -> tuple[ServedModel, SamplingParams, int | None, Any]:
    """The model's server (loaded on demand) and the sampling parameters, log-probabilities and
    grammar a request asks for."""
    front.offer(model_name(body.model))
    r = reply_params(data, "ollama")
    fmt = body.format
    grammar = None if not fmt else ("json_schema", {"type": "object"} if fmt == "json" else fmt)
    alive = keep_alive(body.keep_alive)
    server = await front.pick(request, model_name(body.model), keep_alive=alive)
    return server, options(server, body.options or {}), r.top_logprobs if r.logprobs else None, \
        grammar


async def unload(front: Front, body: _OllamaRequest) -> Response | None:
    """Ollama's way to unload a model: a request with nothing to answer and ``keep_alive`` 0.
    None when ``body`` is not one."""
    if keep_alive(body.keep_alive) != 0:
        return None
    offer = front.offer(model_name(body.model))
    try:
        await run_in_threadpool(front.pool.unload, offer.name)
    except PoolError as e:
        raise bad_request(str(e), "keep_alive") from None
    return JSONResponse({"model": offer.name, "created_at": now(), "done": True,
                         "done_reason": "unload"})


def thinking(body: _OllamaRequest) -> Thinking:
    """``think``: true or false, or an effort (engine.chat.reasoning)."""
    if body.think is None:
        return Thinking()
    if isinstance(body.think, bool):
        return Thinking(on=True) if body.think else OFF
    return from_effort(body.think)


def options(server: ServedModel, given: dict[str, Any]) -> SamplingParams:
    """Ollama's ``options``, read through the parameter table."""
    for name, value in given.items():
        if name in READ or name in LOAD_OPTIONS or name in NO_EFFECT:
            continue
        if name != "num_ctx" and name not in NEUTRAL_OPTIONS:
            raise bad_request(f"options.{name} is not supported by this server", f"options.{name}")
        if value is None:  # not set
            continue
        if name == "num_ctx":
            if type(value) is not int or value > server.n_ctx:
                raise bad_request(f"options.num_ctx: this server's context is {server.n_ctx} "
                                  "tokens", "options.num_ctx")
        elif value not in NEUTRAL_OPTIONS[name] or type(value) is bool:
            raise bad_request(f"options.{name} is not supported by this server (only "
                              f"{NEUTRAL_OPTIONS[name][-1]!r})", f"options.{name}")
    predict = given.get("num_predict")
    if type(predict) is int and predict in (-1, -2):  # no limit, fill the context
        given = {**given, "num_predict": NO_LIMIT}
    try:
        return params.read(SamplingParams, given, "ollama", server.defaults)
    except params.ParamError as e:
        raise bad_request(f"options.{e}", f"options.{e.api_name}" if e.api_name else
                          "options") from None


def _messages(body: OllamaChatRequest) -> list[Message]:
    out: list[Message] = []
    pending: list[ToolCall] = []  # calls not answered yet, oldest first
    for i, m in enumerate(body.messages):
        if m.images and m.role != "user":
            raise bad_request(f"messages[{i}].images: only a user's message carries images",
                              f"messages.{i}.images")
        pictures = tuple(images.from_base64(x, f"messages.{i}.images.{j}")
                         for j, x in enumerate(m.images or ()))
        if m.tool_calls and m.role != "assistant":
            raise bad_request(f"messages[{i}]: only an assistant's message carries tool_calls",
                              f"messages.{i}.tool_calls")
        calls = tuple(ToolCall(c.id or f"call_{i}_{j}", c.function.name,
                               json.dumps(c.function.arguments))
                      for j, c in enumerate(m.tool_calls or ()))
        pending += calls
        if m.role != "tool":
            out.append(Message(m.role, m.content or "", tool_calls=calls, images=pictures))
            continue
        # Ollama's tool results name their function, not the call: they answer the oldest
        # call of that function not answered yet.
        call = next((c for c in pending if c.id == m.tool_call_id or
                     (m.tool_call_id is None and m.tool_name in (None, c.name))), None)
        if call is not None:
            pending.remove(call)
        out.append(Message("tool", m.content or "", name=m.tool_name or (call.name if call is not None else ""),
                           tool_call_id=call.id if call is not None else m.tool_call_id or ""))
    images.check_count([p for m in out for p in m.images], "messages")
    return out


def _tools(body: OllamaChatRequest) -> tuple[Tool, ...]:
    return tuple(Tool(t.function.name, t.function.description or "",
                      t.function.parameters or {"type": "object", "properties": {}})
                 for t in body.tools or ())


# -- routes -------------------------------------------------------------------------------
async def chat(request: Request) -> Response:
    front = Front.checked(request)
    data = await front.read_json(request)
    body = schema.parse(OllamaChatRequest, data)
    if not body.messages and (gone := await unload(front, body)) is not None:
        return gone
    server, sampling, logprobs, grammar = await _common(front, request, body, data)
    if not body.messages:  # Ollama loads the model and says so
        return JSONResponse(_loaded(server, {"message": {"role": "assistant", "content": ""}}))
    chat = Chat(tuple(_messages(body)), sampling, _tools(body), response=grammar,
                logprobs=logprobs, param_names=NAMES, thinking=thinking(body))
    turn = await server.prepare(chat)
    return await server.answer(request, turn, OllamaShaper(server, "chat"), body.stream)


async def generate(request: Request) -> Response:
    front = Front.checked(request)
    data = await front.read_json(request)
    body = schema.parse(OllamaGenerateRequest, data)
    if not body.prompt and (gone := await unload(front, body)) is not None:
        return gone
    server, sampling, logprobs, grammar = await _common(front, request, body, data)
    for name in ("suffix", "template", "context"):
        if getattr(body, name):
            raise bad_request(f"{name} is not supported by this server", name)
    if not body.prompt:
        return JSONResponse(_loaded(server, {"response": ""}))
    # a model with no chat template is given the prompt as it is (Ollama's own default
    # template for one is ``{{ .Prompt }}``): a base model continues it
    pictures = tuple(images.from_base64(x, f"images.{j}") for j, x in enumerate(body.images or ()))
    images.check_count(list(pictures), "images")
    if body.raw or server.model.chat_template is None:
        if pictures:
            raise bad_request("images need the model's chat template (not raw, not a base model)", "images")
        if body.system:
            why = "raw" if body.raw else f"a prompt to {server.model_id}, which has no chat template"
            raise bad_request(f"system cannot be combined with {why} (the prompt is used as it is)",
                              "system")
        turn = await server.prepare_raw(Raw(body.prompt, sampling, grammar, logprobs,
                                            param_names={"response_format": "format"}))
    else:
        messages = ((Message("system", body.system),) if body.system else ()) + (
            Message("user", body.prompt, images=pictures),)
        turn = await server.prepare(Chat(messages, sampling, response=grammar, logprobs=logprobs,
                                         param_names={**NAMES, "messages": "prompt"},
                                         thinking=thinking(body)))
    return await server.answer(request, turn, OllamaShaper(server, "generate"), body.stream)


def _loaded(server: ServedModel, reply: dict) -> dict:
    return {"model": server.model_id, "created_at": now(), **reply, "done": True,
            "done_reason": "load"}


# -- replies ------------------------------------------------------------------------------
class OllamaShaper:
    """Ollama's bodies for one chat or generate request: a whole reply, or one JSON line for
    each streamed piece (the last carries the end)."""

    media_type = "application/x-ndjson"

    def __init__(self, server: ServedModel, kind: Literal["chat", "generate"]) -> None:
        self.chat = kind == "chat"
        self.model_id = server.model_id
        self.model = server.model  # token texts for logprobs
        self.calls = 0

    # -- the stream (engine.server.shape.Shaper) ---------------------------------------------
    def start(self) -> list[bytes]:
        return []

    def text(self, piece: Text) -> list[bytes]:
        if piece.thinking:
            return [line(self.body("", (), piece.tokens, reasoning=piece.text))]
        return [line(self.body(piece.text, (), piece.tokens))]

    def call(self, call: ToolCall) -> list[bytes]:
        return [line(self.body("", (call,), ()))]

    def end(self, end: End) -> list[bytes]:
        return [line(self.body("", (), (), end))]

    def failed(self, error: ApiError) -> list[bytes]:
        return [line({"error": error.message})]

    def whole(self, text: str, calls: list[ToolCall], tokens: list[Token], end: End,
              reasoning: str = "") -> dict:
        return self.body(text, calls, tokens, end, reasoning)

    def body(self, text: str, calls: Sequence[ToolCall], tokens: Sequence[Token],
             end: End | None = None, reasoning: str = "") -> dict:
        out: dict[str, Any] = {"model": self.model_id, "created_at": now()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if reasoning:
                message["thinking"] = reasoning
            if calls:
                message["tool_calls"] = [self._call(c) for c in calls]
            out["message"] = message
        else:
            out["response"] = text
            if reasoning:
                out["thinking"] = reasoning
        if tokens:
            out["logprobs"] = chat_logprobs(self.model, tokens)
        out["done"] = end is not None
        if end is not None:
            s = end.done.stats
            out.update(done_reason="length" if end.finish == "length" else "stop",
                       total_duration=_ns(s.elapsed_s), load_duration=0,
                       prompt_eval_count=s.n_prompt_tokens, prompt_eval_duration=_ns(s.prompt_s),
                       eval_count=s.n_completion, eval_duration=_ns(s.gen_s))
        return out

    def _call(self, call: ToolCall) -> dict:
        self.calls += 1
        return {"id": call.id, "function": {"index": self.calls - 1, "name": call.name,
                                            "arguments": call.parsed_arguments()}}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def line(obj: dict) -> bytes:
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8")


# -- errors -------------------------------------------------------------------------------
def error_response(e: ApiError) -> Response:
    return JSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)
