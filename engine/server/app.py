"""The Starlette application: routes, authentication, body limits, and the event bridge.

Starlette (on uvicorn) rather than FastAPI: four routes need no dependency injection or
generated docs; pydantic validates the bodies and ``StreamingResponse`` carries server-sent
events. Handlers tokenize (the tokenizer is read-only and thread-safe), check the prompt against
the context, and queue one job for the engine thread; events come back through an asyncio queue.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from dataclasses import dataclass, replace
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine import params
from engine.chat import ROLES, Message
from engine.errors import DuetError
from engine.events import Done, Token
from engine.prompt import chat_tokens
from engine.sampling import SamplingParams
from engine.server import schema
from engine.server.engine_thread import EngineThread, Job, QueueFull
from engine.server.errors import ApiError, bad_request
from engine.server.responses import Shaper, sse

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often a waiting handler checks whether its client is still there


@dataclass(frozen=True)
class ServerConfig:
    model_id: str
    aliases: frozenset[str] = frozenset()
    api_key: str | None = None
    max_body: int = 8 << 20
    cors_origins: tuple[str, ...] = ()
    retry_after_s: int = 1


class _Gone(Exception):
    """The client disconnected."""


class DuetServer:
    """What the routes share: the engine thread, the model (for tokenizing) and the config."""

    def __init__(self, engine: EngineThread, config: ServerConfig) -> None:
        self.engine = engine
        self.config = config
        self.model = engine.runtime.target
        self.n_ctx = engine.runtime.ctx.n_ctx
        self.defaults = engine.runtime.config.sampling
        self.n_template = _template_prefix(self.model)

    # -- checks ---------------------------------------------------------------------------
    def check_auth(self, request: Request) -> None:
        key = self.config.api_key
        if not key:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise ApiError(401, "invalid or missing API key (send Authorization: Bearer KEY)",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.config.model_id and name not in self.config.aliases:
            raise ApiError(404, f"the model '{name}' does not exist (this server has "
                                f"'{self.config.model_id}')", param="model", code="model_not_found")

    async def read_json(self, request: Request) -> object:
        limit = self.config.max_body
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise ApiError(413, f"the request body exceeds {limit} bytes", code="request_too_large")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise ApiError(413, f"the request body exceeds {limit} bytes", code="request_too_large")
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as e:
            raise bad_request(f"the body is not valid JSON: {str(e)[:200]}") from None

    def sampling(self, data: dict, dialect: str = "openai") -> SamplingParams:
        """The request's sampling: the server's defaults with every field the body sets (the
        parameter table names them, per dialect)."""
        try:
            return params.read(SamplingParams, data, dialect, self.defaults)
        except params.ParamError as e:
            raise bad_request(str(e), e.api_name) from None

    def fit(self, prompt: list[int], sampling: SamplingParams) -> SamplingParams:
        if not prompt:
            raise bad_request("the prompt is empty", "prompt")
        if len(prompt) >= self.n_ctx:
            raise ApiError(400, f"this model's context is {self.n_ctx} tokens; the prompt has "
                                f"{len(prompt)}", param="messages", code="context_length_exceeded")
        return replace(sampling, max_tokens=min(sampling.max_tokens, self.n_ctx - len(prompt)))

    # -- the engine -----------------------------------------------------------------------
    def submit(self, prompt: list[int], sampling: SamplingParams) -> tuple[Job, asyncio.Queue]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def emit(item: object) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, item)
            except RuntimeError:  # the loop is closed: the server is shutting down
                pass

        job = Job(prompt, sampling, emit, n_template=self.n_template)
        try:
            self.engine.submit(job)
        except QueueFull:
            raise ApiError(429, "the server is busy: too many queued requests; retry later",
                           type="rate_limit_error", code="queue_full",
                           headers={"Retry-After": str(self.config.retry_after_s)}) from None
        return job, events


class _Watch:
    """Takes the engine's items for one request, checking every POLL_S that its client is still
    connected (even while items keep coming); a client gone cancels the job and raises _Gone."""

    def __init__(self, request: Request, job: Job, events: asyncio.Queue) -> None:
        self.request, self.job, self.events = request, job, events
        self._checked = time.monotonic()

    async def next(self) -> object:
        while True:
            if time.monotonic() - self._checked >= POLL_S:
                self._checked = time.monotonic()
                if await self.request.is_disconnected():
                    self.job.cancel.set()
                    raise _Gone
            try:
                return await asyncio.wait_for(self.events.get(), POLL_S)
            except asyncio.TimeoutError:
                continue


def _engine_error(item: BaseException) -> ApiError:
    if isinstance(item, DuetError):
        return ApiError(500, str(item), type="server_error", code="engine_error")
    return ApiError(500, "the engine failed on this request (see the server log)", type="server_error")


def _messages(body: schema.ChatRequest) -> list[Message]:
    if not body.messages:
        raise bad_request("messages must not be empty", "messages")
    out = []
    for i, m in enumerate(body.messages):
        role = "system" if m.role == "developer" else m.role
        if role not in ROLES:
            raise bad_request(f"messages[{i}].role: {m.role!r} is not supported (system, user, "
                              f"assistant)", f"messages.{i}.role")
        if m.content is None:
            raise bad_request(f"messages[{i}].content is missing", f"messages.{i}.content")
        if isinstance(m.content, str):
            text = m.content
        else:
            parts = []
            for j, part in enumerate(m.content):
                if part.type != "text" or part.text is None:
                    raise bad_request(f"messages[{i}].content[{j}]: only text parts are supported",
                                      f"messages.{i}.content.{j}")
                parts.append(part.text)
            text = "\n".join(parts)
        out.append(Message(role, text))
    return out


def _completion_prompt(server: DuetServer, body: schema.CompletionRequest) -> list[int]:
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        if any(not 0 <= t < server.model.n_vocab for t in prompt):
            raise bad_request("prompt: a token id is outside the vocabulary", "prompt")
        return list(prompt)
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise bad_request("prompt: give one string (batches are not supported)", "prompt")
        prompt = prompt[0]
    if not prompt:
        raise bad_request("the prompt is empty", "prompt")
    return server.model.tokenize(prompt, add_special=True, parse_special=True)


def _template_prefix(model) -> int:
    """Tokens that every chat prompt starts with (BOS, the template's opening)."""
    from engine.generate import common_prefix

    try:
        a = chat_tokens(model, [Message("system", "a"), Message("user", "x")])
        b = chat_tokens(model, [Message("system", "b"), Message("user", "x")])
    except DuetError:
        return 0
    return common_prefix(a, b)


# -- routes -----------------------------------------------------------------------------
async def chat_completions(request: Request) -> Response:
    server: DuetServer = request.app.state.duet
    server.check_auth(request)
    data = await server.read_json(request)
    body = schema.parse(schema.ChatRequest, data)
    server.check_model(body.model)
    messages = _messages(body)
    sampling = server.sampling(data)
    try:
        prompt = await run_in_threadpool(chat_tokens, server.model, messages)
    except DuetError as e:
        raise bad_request(str(e), "messages") from None
    except UnicodeError:
        raise bad_request("the messages are not valid Unicode text", "messages") from None
    return await _respond(request, server, "chat", body, prompt, sampling)


async def completions(request: Request) -> Response:
    server: DuetServer = request.app.state.duet
    server.check_auth(request)
    data = await server.read_json(request)
    body = schema.parse(schema.CompletionRequest, data)
    server.check_model(body.model)
    sampling = server.sampling(data)
    try:
        prompt = await run_in_threadpool(_completion_prompt, server, body)
    except UnicodeError:
        raise bad_request("the prompt is not valid Unicode text", "prompt") from None
    return await _respond(request, server, "text", body, prompt, sampling)


async def _respond(request: Request, server: DuetServer, kind: str, body: schema._Sampling,
                   prompt: list[int], sampling: SamplingParams) -> Response:
    sampling = server.fit(prompt, sampling)
    job, events = server.submit(prompt, sampling)
    shaper = Shaper(kind, server.config.model_id)
    if body.stream:
        return StreamingResponse(_stream(request, job, events, shaper, body.include_usage),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    watch = _Watch(request, job, events)
    try:
        while True:
            item = await watch.next()
            if isinstance(item, BaseException):
                raise _engine_error(item)
            if isinstance(item, Done) and item.reason == "cancelled":  # the server is stopping
                raise ApiError(503, "the server stopped before this request ran", type="server_error")
            if isinstance(item, Done):
                return JSONResponse(shaper.full(item))
    except _Gone:
        return Response(status_code=499)
    finally:
        job.cancel.set()  # a no-op once done; stops the engine if this handler is abandoned


async def _stream(request: Request, job: Job, events: asyncio.Queue, shaper: Shaper,
                  include_usage: bool) -> AsyncIterator[bytes]:
    watch = _Watch(request, job, events)
    try:
        if shaper.chat:
            yield sse(shaper.chunk("", role=True))
        while True:
            item = await watch.next()
            if isinstance(item, BaseException):
                yield sse(_engine_error(item).body())
                break
            if isinstance(item, Token) and item.text:
                yield sse(shaper.chunk(item.text))
            elif isinstance(item, Done):
                if item.tail:
                    yield sse(shaper.chunk(item.tail))
                yield sse(shaper.final_chunk(item))
                if include_usage:
                    yield sse(shaper.usage_chunk(item))
                break
        yield sse("[DONE]")
    except _Gone:
        log.info("a client disconnected; its generation is cancelled")
    finally:
        job.cancel.set()


async def models(request: Request) -> Response:
    server: DuetServer = request.app.state.duet
    server.check_auth(request)
    return JSONResponse({"object": "list", "data": [
        {"id": server.config.model_id, "object": "model", "created": 0, "owned_by": "duet",
         "meta": {"n_ctx": server.n_ctx, "n_vocab": server.model.n_vocab}}]})


async def health(request: Request) -> Response:
    server: DuetServer = request.app.state.duet
    stats = server.engine.stats()
    return JSONResponse({"status": "ok", "model": server.config.model_id, "queued": stats["queued"],
                         "cache_hit_rate": stats["cache"]["hit_rate"]})


async def stats(request: Request) -> Response:
    server: DuetServer = request.app.state.duet
    server.check_auth(request)
    return JSONResponse(server.engine.stats())


# -- errors -----------------------------------------------------------------------------
async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return ApiError(exc.status_code, str(exc.detail), code=code, headers=exc.headers).response()


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unexpected error on %s: %r", request.url.path, exc)
    return ApiError(500, "internal server error", type="server_error").response()


def create_app(engine: EngineThread, config: ServerConfig) -> Starlette:
    middleware = []
    if config.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"],
                                     allow_headers=["Authorization", "Content-Type"]))
    app = Starlette(
        routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                Route("/v1/completions", completions, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
                Route("/v1/duet/stats", stats, methods=["GET"]),
                Route("/health", health, methods=["GET"])],
        middleware=middleware,
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, Exception: _unexpected})
    app.state.duet = DuetServer(engine, config)
    return app
