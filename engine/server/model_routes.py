"""The routes about the models rather than one reply: ``/v1/models`` (every model the server
offers by name, loaded or not, as llama-server's router lists them), ``/models/load`` and
``/models/unload`` (the router's), ``/health`` and ``/v1/duet/stats``."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.models.served import ModelOffer
from engine.runtime.pool import PoolError
from engine.server import schema
from engine.server.core import Front
from engine.server.errors import bad_request


class ModelRequest(schema._Body):
    model: str


def listed(front: Front, offer: ModelOffer) -> dict[str, Any]:
    """One model as /v1/models lists it: its status (loaded, loading or unloaded, and whether
    its last load failed) and what it needs."""
    status: dict[str, Any] = {"value": front.pool.status(offer)}
    if (failure := front.pool.failure(offer)) is not None and status["value"] == "unloaded":
        status.update(failed=True, error=failure)
    meta: dict[str, Any] = {"n_ctx": offer.n_ctx, "size": offer.path.stat().st_size,
                            "memory": offer.bytes_needed, "path": str(offer.path),
                            "draft": offer.draft.stem if offer.draft is not None else None,
                            "aliases": sorted(offer.aliases)}
    loaded = next((lo for lo in front.pool.loaded() if lo.offer is offer), None)
    if loaded is not None:
        meta.update(n_ctx=loaded.value.n_ctx, n_vocab=loaded.value.model.n_vocab)
    meta.update(front.exactness(offer))
    return {"id": offer.name, "object": "model", "created": 0, "owned_by": "duet",
            "status": status, "meta": meta}


async def models(request: Request) -> Response:
    front = Front.checked(request)
    data = await run_in_threadpool(lambda: [listed(front, o) for o in front.pool.offers])
    return JSONResponse({"object": "list", "data": data})


async def load(request: Request) -> Response:
    """Load a model now (a request for it would); answers once it is loaded."""
    front = Front.checked(request)
    body = schema.parse(ModelRequest, await front.read_json(request))
    await front.pick(request, body.model)
    return JSONResponse({"success": True})


async def unload(request: Request) -> Response:
    """Unload a model once its replies in flight are done (success false: it was not loaded)."""
    front = Front.checked(request)
    body = schema.parse(ModelRequest, await front.read_json(request))
    offer = front.offer(body.model)
    try:
        return JSONResponse({"success": await run_in_threadpool(front.pool.unload, offer.name)})
    except PoolError as e:
        raise bad_request(str(e), "model") from None


async def health(request: Request) -> Response:
    """Up, with the default model's name and the loaded models' queues."""
    front: Front = request.app.state.duet
    loaded = front.pool.loaded()
    default = next((lo.value for lo in loaded if lo.offer.name == front.config.model_id), None)
    return JSONResponse({
        "status": "ok", "model": front.config.model_id, "loaded": [lo.offer.name for lo in loaded],
        "queued": sum(lo.value.engine.queued for lo in loaded),
        "cache_hit_rate": default.engine.stats()["cache"]["hit_rate"] if default else None})


async def stats(request: Request) -> Response:
    """The default model's engine counters (when it is loaded), and each loaded model's."""
    front = Front.checked(request)
    each = {lo.offer.name: lo.value.engine.stats() for lo in front.pool.loaded()}
    return JSONResponse({**each.get(front.config.model_id, {}), "models": each})
