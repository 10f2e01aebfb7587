"""The server before its model is loaded: the port is open from the first second, and every
route answers 503 with a ``Retry-After`` header and a JSON body in its dialect's error shape
(``/health`` too, as llama-server does), so that a client started with the server waits instead
of meeting "connection refused". ``Gate`` is the ASGI app uvicorn serves: the loading answers
until ``open`` hands it the real app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.server.app import shaped
from engine.server.errors import ApiError

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

RETRY_AFTER_S = 2
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]


def loading_app(what: str) -> Starlette:
    """Every route: 503, "the model is loading" (``what``: the model's name)."""

    async def loading(request: Request) -> Response:
        return shaped(request, ApiError(
            503, f"the model {what} is loading; retry in a moment", type="server_error",
            code="model_loading", headers={"Retry-After": str(RETRY_AFTER_S)}))

    return Starlette(routes=[Route("/{path:path}", loading, methods=METHODS)])


class Gate:
    """Serves ``waiting`` until ``open(app)``; then ``app`` (a request already answered keeps
    its answer; the next one reaches the model)."""

    def __init__(self, waiting: ASGIApp) -> None:
        self.app: ASGIApp = waiting

    def open(self, app: ASGIApp) -> None:
        self.app = app  # one reference swapped: uvicorn's threads see the old app or the new

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
