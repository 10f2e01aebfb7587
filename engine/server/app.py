"""The Starlette application: the dialects' routes (engine.server.dialects: OpenAI's, Anthropic's
Messages, Ollama's), the shared ones (models, health, stats, the OpenAPI document), and the error handlers.

Starlette (on uvicorn) rather than FastAPI: the routes need no dependency injection; pydantic
validates the bodies, the parameter table (engine.params) the sampling fields, and
``StreamingResponse`` carries server-sent events. Every error is answered in the dialect's
shape, never with a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.decode.sampling import SamplingParams
from engine.models.served import ModelOffer
from engine.runtime.pool import Pool
from engine.runtime.runtime import Runtime
from engine.runtime.service import Engine
from engine.server import audio, embeddings, model_routes, openapi
from engine.server.core import ApiConfig, Front, HoldLeases, ServedModel
from engine.server.dialects.anthropic import messages as anthropic
from engine.server.dialects.ollama import models as ollama_models
from engine.server.dialects.ollama import routes as ollama
from engine.server.dialects.openai import chat as openai
from engine.server.dialects.openai import responses as openai_responses
from engine.server.dialects.openai.response_store import ResponseStore
from engine.server.errors import ApiError

__all__ = ["ApiConfig", "create_app", "create_pool_app"]

log = logging.getLogger(__name__)


async def openapi_document(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


ROUTES = (
    Route("/v1/chat/completions", openai.chat_completions, methods=["POST"]),
    Route("/v1/completions", openai.completions, methods=["POST"]),
    Route("/v1/responses", openai_responses.responses, methods=["POST"]),
    Route("/v1/models", model_routes.models, methods=["GET"]),
    Route("/models", model_routes.models, methods=["GET"]),
    Route("/models/load", model_routes.load, methods=["POST"]),
    Route("/models/unload", model_routes.unload, methods=["POST"]),
    Route("/v1/messages", anthropic.messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", anthropic.count_tokens, methods=["POST"]),
    Route("/api/chat", ollama.chat, methods=["POST"]),
    Route("/api/generate", ollama.generate, methods=["POST"]),
    Route("/api/tags", ollama_models.tags, methods=["GET"]),
    Route("/api/ps", ollama_models.ps, methods=["GET"]),
    Route("/api/show", ollama_models.show, methods=["POST"]),
    Route("/api/version", ollama_models.version, methods=["GET"]),
    Route("/v1/embeddings", embeddings.openai_embeddings, methods=["POST"]),
    Route("/v1/audio/transcriptions", audio.transcriptions, methods=["POST"]),
    Route("/api/embed", embeddings.ollama_embed, methods=["POST"]),
    Route("/api/embeddings", embeddings.ollama_embeddings, methods=["POST"]),
    Route("/v1/duet/stats", model_routes.stats, methods=["GET"]),
    Route("/health", model_routes.health, methods=["GET"]),
    Route("/openapi.json", openapi_document, methods=["GET"]),
)  # engine.server.openapi.OPERATIONS describes each one


# -- errors -----------------------------------------------------------------------------
def shaped(request: Request, exc: ApiError) -> Response:
    """``exc`` in the shape of the dialect whose route was asked."""
    path = request.url.path
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return anthropic.error_response(exc)
    if path.startswith("/api/"):
        return ollama.error_response(exc)
    return exc.response()


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return shaped(request, exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return shaped(request, ApiError(exc.status_code, str(exc.detail), code=code,
                                     headers=exc.headers))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unexpected error on %s: %r", request.url.path, exc)
    return shaped(request, ApiError(500, "internal server error", type="server_error"))


def model_names(runtime: Runtime, given: str | None = None) -> tuple[str, frozenset[str]]:
    """The id /v1/models lists (the file's stem) and the other names a request may use."""
    path = Path(runtime.target.path)
    names = {path.name, str(path), runtime.target.display_name}
    if given:
        names.add(given)
    return path.stem, frozenset(names)


def create_app(engine: Engine, config: ApiConfig, others: Sequence[Engine] = ()) -> Starlette:
    """The app over loaded models (the window's: its owner loads and closes them): ``engine``
    as ``config.model_id``, and ``others`` (the window's other kept models) each by its file's
    name (``model_names``)."""
    return create_pool_app(engines_pool(engine, config, others), config,
                           engine.runtime.config.sampling)


def serve_engines(app: Starlette, engine: Engine, config: ApiConfig,
                  others: Sequence[Engine] = ()) -> None:
    """Make ``app`` (create_app's) serve these models from its next request on, as create_app
    would: no restart, so its clients' connections and replies in flight go on (a reply in
    flight ends on the model it began on) and the Responses API's stored replies stay. A model
    it served already keeps its ServedModel (its embeddings, once made, with it)."""
    served = {id(lo.value.engine): lo.value for lo in app.state.duet.pool.loaded()}
    _front(app, engines_pool(engine, config, others, served), config,
           engine.runtime.config.sampling)


def engines_pool(engine: Engine, config: ApiConfig, others: Sequence[Engine] = (),
                 served: Mapping[int, ServedModel] | None = None) -> Pool[ServedModel]:
    """The loaded ``engine`` and ``others`` as a pool that never unloads them (their owner
    does): ``engine`` as ``config.model_id``, each other by its file's name; ``served``: the
    ServedModel of an engine served already (by ``id``), kept where its name is the same."""
    offers: list[ModelOffer] = []
    servers: list[ServedModel] = []
    for i, e in enumerate((engine, *others)):
        name, aliases = (config.model_id, config.aliases) if i == 0 else model_names(e.runtime)
        if any(o.answers_to(name) for o in offers):
            continue
        server = (served or {}).get(id(e))
        if server is None or server.model_id != name:
            server = ServedModel(e, name, config)
            server.prepare_constraints()
        offers.append(ModelOffer(name, Path(e.runtime.target.path), aliases, n_ctx=server.n_ctx))
        servers.append(server)
    pool: Pool[ServedModel] = Pool(offers, reaper=False)
    for offer, server in zip(offers, servers):
        pool.adopt(offer, server)
    return pool


def create_pool_app(pool: Pool[ServedModel], config: ApiConfig,
                     defaults: SamplingParams) -> Starlette:
    """The app over every model of ``pool`` (``config.model_id``: the default one)."""
    middleware = [Middleware(HoldLeases)]
    if config.cors_origins:
        middleware.insert(0, Middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                                        allow_methods=["GET", "POST", "OPTIONS"],
                                        allow_headers=["Authorization", "Content-Type", "x-api-key",
                                                       "anthropic-version"]))
    app = Starlette(
        routes=list(ROUTES),
        middleware=middleware,
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, Exception: _unexpected})
    _front(app, pool, config, defaults)
    app.state.vectors = embeddings.Vectors.of_file(config.embedding_model) \
        if config.embedding_model is not None else None
    app.state.speech = audio.Speech(config.speech_model)  # the model loads at the first request
    app.state.responses = ResponseStore()  # for the Responses API's previous_response_id
    return app


def _front(app: Starlette, pool: Pool[ServedModel], config: ApiConfig,
           defaults: SamplingParams) -> None:
    """The models ``app`` serves: its routes find them through ``app.state.duet``, read at
    each request (one assignment: a request sees the old models or the new)."""
    n_ctx = max((o.n_ctx for o in pool.offers), default=0)
    app.state.openapi = openapi.document([o.name for o in pool.offers], n_ctx)
    app.state.duet = Front(pool, config, defaults)

