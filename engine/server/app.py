"""The Starlette application: the dialects' routes (OpenAI in engine.server.openai, Anthropic
Messages in engine.server.anthropic, Ollama in engine.server.ollama and ollama_models), the
shared ones (models, health, stats, the OpenAPI document), and the error handlers.

Starlette (on uvicorn) rather than FastAPI: the routes need no dependency injection; pydantic
validates the bodies, the parameter table (engine.params) the sampling fields, and
``StreamingResponse`` carries server-sent events. Every error is answered in the dialect's
shape, never with a traceback.
"""

from __future__ import annotations

import logging
from functools import partial

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.decode import constraint
from engine.runtime.service import Engine
from engine.server import anthropic, embeddings, ollama, ollama_models, openai, openai_responses, openapi
from engine.server.core import ApiConfig, DuetServer
from engine.server.errors import ApiError
from engine.server.response_store import ResponseStore

__all__ = ["ApiConfig", "create_app"]

log = logging.getLogger(__name__)


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


async def openapi_document(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


ROUTES = (
    Route("/v1/chat/completions", openai.chat_completions, methods=["POST"]),
    Route("/v1/completions", openai.completions, methods=["POST"]),
    Route("/v1/responses", openai_responses.responses, methods=["POST"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/v1/messages", anthropic.messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", anthropic.count_tokens, methods=["POST"]),
    Route("/api/chat", ollama.chat, methods=["POST"]),
    Route("/api/generate", ollama.generate, methods=["POST"]),
    Route("/api/tags", ollama_models.tags, methods=["GET"]),
    Route("/api/ps", ollama_models.ps, methods=["GET"]),
    Route("/api/show", ollama_models.show, methods=["POST"]),
    Route("/api/version", ollama_models.version, methods=["GET"]),
    Route("/v1/embeddings", embeddings.openai_embeddings, methods=["POST"]),
    Route("/api/embed", embeddings.ollama_embed, methods=["POST"]),
    Route("/api/embeddings", embeddings.ollama_embeddings, methods=["POST"]),
    Route("/v1/duet/stats", stats, methods=["GET"]),
    Route("/health", health, methods=["GET"]),
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


def create_app(engine: Engine, config: ApiConfig) -> Starlette:
    middleware = []
    if config.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"],
                                     allow_headers=["Authorization", "Content-Type", "x-api-key",
                                                    "anthropic-version"]))
    app = Starlette(
        routes=list(ROUTES),
        middleware=middleware,
        exception_handlers={ApiError: _api_error, HTTPException: _http_error, Exception: _unexpected})
    app.state.duet = DuetServer(engine, config)
    app.state.vectors = embeddings.Vectors(app.state.duet, config.embedding_model)
    app.state.responses = ResponseStore()  # for the Responses API's previous_response_id
    app.state.openapi = openapi.document(config.model_id, app.state.duet.n_ctx)
    # agents send schemas: the first one does not wait for llguidance's view of the vocabulary
    engine.add_idle(partial(constraint.prepare, engine.runtime.target))
    return app
