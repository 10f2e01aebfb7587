"""What every dialect's routes share: the configuration, authentication, request bodies, the
model a request names (``Front.pick``: a lease from the pool of loaded models, engine.runtime.pool),
and the bridge to that model's engine (``ServedModel``: a turn queued as a job; its events come
back through an asyncio queue, while the client's connection is watched)."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from engine.decode import constraint
from engine.decode.sampling import SamplingParams
from engine.errors import DuetError
from engine.events import Done
from engine.llama.exactness import Exactness
from engine.models.served import ModelOffer
from engine.runtime.pool import Lease, LoadFailed, Pool, PoolError, UnknownModel
from engine.runtime.service import Engine, Job, QueueFull
from engine.server.errors import ApiError, Gone, bad_request
from engine.server.shape import Shaper, stream
from engine.server.turn import Chat, PreparedTurn, Raw, client_raw_turn, client_turn, collect, pieces

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often a waiting handler checks whether its client is still there


@dataclass(frozen=True)
class ApiConfig:
    """The server's settings; ``model_id`` and ``aliases``: the default model's names (a request
    that names no model gets it)."""

    model_id: str
    aliases: frozenset[str] = frozenset()
    api_key: str | None = None
    max_body: int = 8 << 20
    cors_origins: tuple[str, ...] = ()
    retry_after_s: int = 1
    embedding_model: Path | None = None  # None: embeddings from the chat model, mean-pooled
    speech_model: Path | None = None  # a faster-whisper folder; None: the catalogue's whisper
    max_audio: int = 25 << 20  # the largest audio upload, OpenAI's limit
    reasoning_budget: int | None = None  # a reasoning model's thinking, when a request sets none
    exactness: Exactness | None = None  # the offered models' before they load (None: unknown)


class Front:
    """What every route starts with: the key, the body, and the model it names (a lease on it
    from the pool, loaded first if it is not, held until the answer is sent: ``Leases``)."""

    def __init__(self, pool: Pool[ServedModel], config: ApiConfig,
                 defaults: SamplingParams) -> None:
        self.pool, self.config = pool, config
        self.defaults = defaults  # the sampling a request's fields override (every model's)

    @staticmethod
    def checked(request: Request, *, header: str | None = None) -> Front:
        """The app's Front, once the request's API key is checked (``check_auth``)."""
        front: Front = request.app.state.duet
        front.check_auth(request, header=header)
        return front

    def check_auth(self, request: Request, *, header: str | None = None) -> None:
        """The API key, as ``Authorization: Bearer KEY`` (or in ``header``, when the dialect
        has its own, such as Anthropic's x-api-key)."""
        key = self.config.api_key
        if not key:
            return
        token = request.headers.get(header, "") if header else ""
        if not token:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            token = token if scheme.lower() == "bearer" else ""
        if not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise ApiError(401, "invalid or missing API key (send Authorization: Bearer KEY)",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    async def read_json(self, request: Request) -> Any:
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

    def exactness(self, offer: ModelOffer) -> dict[str, Any]:
        """Whether ``offer``'s replies are exact, and why not (engine.llama.exactness): its
        runtime's when loaded, else what the server's settings give (None: unknown)."""
        loaded = next((lo for lo in self.pool.loaded() if lo.offer is offer), None)
        exact = loaded.value.exactness if loaded is not None else self.config.exactness
        return exact.to_json() if exact is not None else {"exact": None, "exact_reason": None}

    def offer(self, name: str | None, param: str = "model") -> ModelOffer:
        """The model ``name`` names (None: the default), or 404."""
        try:
            return self.pool.find(self.config.model_id if name is None else name)
        except UnknownModel as e:
            raise ApiError(404, str(e), param=param, code="model_not_found") from None

    async def pick(self, request: Request, name: str | None, param: str = "model", *,
                   keep_alive: float | None = None) -> ServedModel:
        """The server of the model ``name`` (None: the default), loaded if it is not: the
        client waits. A lease keeps it loaded until this request's answer is sent."""
        offer = self.offer(name, param)
        leases: Leases = request.scope[LEASES]

        def take() -> ServedModel:
            lease = self.pool.acquire(offer.name)
            leases.add(lease)  # released with the answer, or at once if the client has gone
            if keep_alive is not None:
                lease.keep_alive(keep_alive)
            return lease.value

        try:
            return await run_in_threadpool(take)
        except LoadFailed as e:
            raise ApiError(500, str(e), type="server_error", code="model_load_failed") from None
        except PoolError as e:
            raise ApiError(503, str(e), type="server_error", code="model_unavailable",
                           headers={"Retry-After": str(self.config.retry_after_s)}) from None


LEASES = "duet.leases"


class Leases:
    """The leases one request holds; ``close`` releases them once the answer is sent (and any
    taken later at once: a load that ended after its client left)."""

    def __init__(self) -> None:
        self._held: list[Lease] = []
        self._closed = False
        self._lock = threading.Lock()

    def add(self, lease: Lease) -> None:
        with self._lock:
            if not self._closed:
                self._held.append(lease)
                return
        lease.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            held, self._held = self._held, []
        for lease in held:
            lease.release()


class HoldLeases:
    """ASGI middleware: each HTTP request's ``Leases``, released when its answer is sent (a
    stream included: the app returns once the last byte has gone)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        leases = scope[LEASES] = Leases()
        try:
            await self.app(scope, receive, send)
        finally:
            leases.close()


class ServedModel:
    """One loaded model as the routes use it: its engine thread, the model (for tokenizing),
    its name and its defaults."""

    def __init__(self, engine: Engine, model_id: str, config: ApiConfig) -> None:
        self.engine = engine
        self.model_id = model_id
        self.config = config
        self.model = engine.runtime.target
        self.exactness = engine.runtime.exactness  # whether its replies are exact, and why not
        self.n_ctx = engine.runtime.ctx.n_ctx
        self.defaults = engine.runtime.config.sampling
        self.n_template = engine.runtime.n_template  # (made once, at the load)
        self.vectors: Any = None  # its mean-pooled embeddings (engine.server.embeddings), once asked
        self._prepared = False

    def prepare_constraints(self) -> None:
        """Agents send schemas: llguidance's view of the vocabulary is made while the engine
        is idle (once), so that the first one does not wait for it. Not at the load itself: a
        model loaded for a request answers it first (the view takes about a second)."""
        if not self._prepared:
            self._prepared = True
            self.engine.add_idle(partial(constraint.prepare, self.model, self.engine.preempt))

    def close(self) -> None:
        if self.vectors is not None:
            self.engine.call(self.vectors.source.close).result()
        self.engine.close()

    async def prepare(self, chat: Chat) -> PreparedTurn:
        t, budget = chat.thinking, self.config.reasoning_budget
        if budget == 0 and t.on is None:  # the server's default: no thinking
            chat = replace(chat, thinking=replace(t, on=False))
        elif budget is not None and t.on is not False and t.budget is None:  # its default budget
            chat = replace(chat, thinking=replace(t, budget=budget))
        return await run_in_threadpool(client_turn, self.model, chat, self.n_ctx)

    async def prepare_raw(self, raw: Raw) -> PreparedTurn:
        return await run_in_threadpool(client_raw_turn, self.model, raw, self.n_ctx)

    # -- the engine -----------------------------------------------------------------------
    def submit(self, turn: PreparedTurn) -> tuple[Job, asyncio.Queue]:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def emit(item: object) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, item)
            except RuntimeError:  # the loop is closed: the server is shutting down
                pass

        matcher = turn.grammar.matcher() if turn.grammar is not None else None
        job = Job(turn.prompt, turn.sampling, emit, n_template=self.n_template, grammar=matcher,
                  logprobs=turn.logprobs, think=turn.think)
        try:
            self.engine.submit(job)
            self.prepare_constraints()  # after the job: it waits for nothing
        except QueueFull:
            raise ApiError(429, "the server is busy: too many queued requests; retry later",
                           type="rate_limit_error", code="queue_full",
                           headers={"Retry-After": str(self.config.retry_after_s)}) from None
        return job, events

    async def run(self, request: Request, turn: PreparedTurn) -> AsyncIterator[object]:
        """The engine's events for ``turn``, ending with its ``Done``; Gone when the client
        leaves (the job is cancelled), ApiError when the engine fails. The job is queued at
        once (a full queue answers 429 before anything is sent)."""
        job, events = self.submit(turn)
        return _watched(request, job, events)

    async def answer(self, request: Request, turn: PreparedTurn, shaper: Shaper,
                     streamed: bool) -> Response:
        """Runs ``turn`` and answers in ``shaper``'s dialect: streamed, or one JSON body of the
        whole reply (no answer, 499, to a client that left)."""
        reply = pieces(await self.run(request, turn), turn)
        if streamed:
            return StreamingResponse(stream(reply, shaper), media_type=shaper.media_type,
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            text, calls, tokens, end, reasoning = await collect(reply)
        except Gone:
            return Response(status_code=499)
        return JSONResponse(shaper.whole(text, calls, tokens, end, reasoning))


async def _watched(request: Request, job: Job, events: asyncio.Queue) -> AsyncIterator[object]:
    checked = time.monotonic()
    try:
        while True:
            if time.monotonic() - checked >= POLL_S:
                checked = time.monotonic()
                if await request.is_disconnected():
                    raise Gone
            try:
                item = await asyncio.wait_for(events.get(), POLL_S)
            except TimeoutError:
                continue
            if isinstance(item, BaseException):
                raise engine_error(item)
            if isinstance(item, Done) and item.reason == "cancelled":  # the server is stopping
                raise ApiError(503, "the server stopped before this request ran",
                               type="server_error")
            yield item
            if isinstance(item, Done):
                return
    finally:
        job.cancel.set()  # a no-op once done; stops the engine when the client is gone


def engine_error(item: BaseException) -> ApiError:
    if isinstance(item, DuetError):
        return ApiError(500, str(item), type="server_error", code="engine_error")
    return ApiError(500, "the engine failed on this request (see the server log)", type="server_error")

