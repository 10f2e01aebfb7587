"""Ollama's model routes: ``/api/tags`` lists the served models by name, ``/api/ps`` the loaded
ones (with when each unloads), ``/api/show`` describes one from its GGUF header (its metadata,
template and capabilities; nothing is loaded), ``/api/version`` says which Duet answers."""

from __future__ import annotations

import hashlib
import json
import math
import time
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ConfigDict
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

import engine
from engine import params
from engine.decode.sampling import SamplingParams
from engine.llama.backend import lib
from engine.models import served
from engine.models.projector import find_projector
from engine.models.served import ModelOffer
from engine.server import schema
from engine.server.core import Front
from engine.server.dialects.ollama.routes import model_name
from engine.server.errors import ApiError, bad_request

# llama.cpp's file types (general.file_type) by number: 15 -> Q4_K_M
FILE_TYPES = {v: k.removeprefix("LLAMA_FTYPE_MOSTLY_").removeprefix("LLAMA_FTYPE_ALL_")
              for k, v in vars(lib).items()
              if k.startswith(("LLAMA_FTYPE_MOSTLY_", "LLAMA_FTYPE_ALL_")) and isinstance(v, int)}
MAX_INFO_CHARS = 256  # metadata values longer than this (token lists, templates) are left out


class ShowRequest(schema._Body):
    model_config = ConfigDict(json_schema_extra={"anyOf": [{"required": ["model"]},
                                                           {"required": ["name"]}]})

    model: str | None = None
    name: str | None = None  # the field's older name
    verbose: bool = False


def _model(front: Front, offer: ModelOffer) -> dict[str, Any]:
    """The model as /api/tags lists it."""
    stat = offer.path.stat()
    # An identity, not a checksum: hashing a gigabyte file at every listing would be slow.
    digest = hashlib.sha256(f"{offer.path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    modified = datetime.fromtimestamp(stat.st_mtime, UTC).isoformat()
    return {"name": offer.name, "model": offer.name, "modified_at": modified,
            "size": stat.st_size, "digest": digest, "details": _details(_header(offer.path))}


def _header(path: Path) -> dict[str, Any]:
    """The metadata of ``path``'s GGUF header, and its parameter count (read once a file)."""
    stat = path.stat()
    return _read_header(path, stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=64)
def _read_header(path: Path, size: int, mtime_ns: int) -> dict[str, Any]:
    found = served.read(path)
    if found is None:
        raise ApiError(500, f"cannot read the GGUF header of {path}", type="server_error")
    meta = dict(found.header.metadata)
    meta["general.parameter_count"] = sum(math.prod(t.shape) for t in found.header.tensors)
    return meta


def _details(meta: dict[str, Any]) -> dict[str, Any]:
    arch = str(meta.get("general.architecture", ""))
    file_type = meta.get("general.file_type")
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch],
            "parameter_size": str(meta.get("general.size_label", "")),
            "quantization_level": FILE_TYPES.get(file_type, "") if isinstance(file_type, int) else ""}


async def tags(request: Request) -> Response:
    front = Front.checked(request)
    models = await run_in_threadpool(lambda: [_model(front, o) for o in front.pool.offers])
    return JSONResponse({"models": models})


async def ps(request: Request) -> Response:
    front = Front.checked(request)
    loaded = front.pool.loaded()

    def listed() -> list[dict[str, Any]]:
        return [{**_model(front, lo.offer), "size": lo.offer.bytes_needed or lo.offer.path.stat().st_size,
                 "size_vram": 0, "context_length": lo.value.n_ctx,
                 "expires_at": _expires(lo.expires)} for lo in loaded]

    return JSONResponse({"models": await run_in_threadpool(listed)})


def _expires(at: float | None) -> str:
    """A monotonic deadline as Ollama's ``expires_at`` (far in the future: never; a keep_alive
    of 10^16 s, which a client may send, is as far, not a date past the year 9999)."""
    wall = min(time.time() + (at - time.monotonic()), NEVER) if at is not None else NEVER
    return datetime.fromtimestamp(wall, UTC).isoformat()


NEVER = datetime(2318, 1, 1, tzinfo=UTC).timestamp()  # Ollama's "for ever" is as far


async def show(request: Request) -> Response:
    front = Front.checked(request)
    body = schema.parse(ShowRequest, await front.read_json(request))
    if not (body.model or body.name):
        raise bad_request("model is required", "model")
    offers = {front.offer(model_name(value), field) for field, value in
              (("model", body.model), ("name", body.name)) if value is not None}
    if len(offers) > 1:  # each one given must name the same model
        raise bad_request("model and name name two models", "name")
    offer = offers.pop()
    meta = await run_in_threadpool(_header, offer.path)
    info: dict[str, Any] = {k: v for k, v in sorted(meta.items())
                            if isinstance(v, int | float | str) and not k.startswith("tokenizer.")
                            and (not isinstance(v, str) or len(v) <= MAX_INFO_CHARS)}
    template = meta.get("tokenizer.chat_template")
    return JSONResponse({
        "modelfile": f"# Served by Duet\nFROM {offer.path}\n",
        "parameters": _parameters(front.defaults),
        "template": template if isinstance(template, str) else "",
        "details": _details(meta),
        "model_info": info,
        # any model: tools (a generic prompt where its template has none, engine.tools.fallback);
        # vision where it reads images (its projector loaded, or beside its file)
        "capabilities": ["completion", "tools"] + (["vision"] if await run_in_threadpool(
            _sees, front, offer, meta) else []),
        "modified_at": _model(front, offer)["modified_at"],
        **front.exactness(offer),  # Duet's: whether its replies are exact, and why not
    })


def _sees(front: Front, offer: ModelOffer, meta: dict[str, Any]) -> bool:
    """Whether the model reads images: its projector loaded with it, or found beside its file."""
    loaded = next((lo for lo in front.pool.loaded() if lo.offer is offer), None)
    if loaded is not None:
        return loaded.value.model.projector is not None
    n_embd = meta.get(f"{meta.get('general.architecture')}.embedding_length")
    return isinstance(n_embd, int) and find_projector(Path(offer.path), n_embd) is not None


def _parameters(defaults: SamplingParams) -> str:
    """The server's default sampling, in Ollama's names, one ``name value`` a line (as a
    Modelfile's PARAMETER lines)."""
    lines = []
    for p in params.table(SamplingParams):
        names, value = p.spec.api.get("ollama", ()), getattr(defaults, p.name)
        lines += [f"{names[0]:<20}{json.dumps(v) if isinstance(v, str) else v}"
                  for v in (value if p.type is tuple else (value,)) if names]
    return "\n".join(lines)


async def version(request: Request) -> Response:
    return JSONResponse({"version": engine.version()})
