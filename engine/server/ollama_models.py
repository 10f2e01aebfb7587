"""Ollama's model routes: ``/api/tags`` and ``/api/ps`` list the served model under its id,
``/api/show`` describes it (its GGUF metadata, template and capabilities), ``/api/version``
says which Duet answers."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from pydantic import ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

import engine
from engine import params
from engine.decode.sampling import SamplingParams
from engine.llama.backend import lib
from engine.server import schema
from engine.server.core import DuetServer
from engine.server.errors import bad_request
from engine.server.ollama import check_model

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


def _model(server: DuetServer) -> dict[str, Any]:
    """The model as /api/tags lists it."""
    m = server.model
    stat = m.path.stat()
    # An identity, not a checksum: hashing a gigabyte file at every listing would be slow.
    digest = hashlib.sha256(f"{m.path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    modified = datetime.fromtimestamp(stat.st_mtime, UTC).isoformat()
    return {"name": server.config.model_id, "model": server.config.model_id,
            "modified_at": modified, "size": m.size_bytes, "digest": digest,
            "details": _details(m)}


def _details(m: Any) -> dict[str, Any]:
    file_type = m.metadata.get("general.file_type", "")
    return {"parent_model": "", "format": "gguf", "family": m.architecture,
            "families": [m.architecture], "parameter_size": m.metadata.get("general.size_label", ""),
            "quantization_level": FILE_TYPES.get(int(file_type), "") if file_type.isdigit() else ""}


async def tags(request: Request) -> Response:
    server: DuetServer = request.app.state.duet
    server.check_auth(request)
    return JSONResponse({"models": [_model(server)]})


async def ps(request: Request) -> Response:
    server: DuetServer = request.app.state.duet
    server.check_auth(request)
    return JSONResponse({"models": [{**_model(server), "size_vram": 0,
                                     "context_length": server.n_ctx}]})


async def show(request: Request) -> Response:
    server: DuetServer = request.app.state.duet
    server.check_auth(request)
    body = schema.parse(ShowRequest, await server.read_json(request))
    if not (body.model or body.name):
        raise bad_request("model is required", "model")
    for field, value in (("model", body.model), ("name", body.name)):  # each one given must
        if value is not None:  # name this model
            check_model(server, value, field)
    m = server.model
    info: dict[str, Any] = {k: _value(v) for k, v in sorted(m.metadata.items())
                            if len(v) <= MAX_INFO_CHARS and not k.startswith("tokenizer.")}
    info["general.parameter_count"] = lib.llama_model_n_params(m.handle)
    return JSONResponse({
        "modelfile": f"# Served by Duet\nFROM {m.path}\n",
        "parameters": _parameters(server.defaults),
        "template": m.chat_template or "",
        "details": _details(m),
        "model_info": info,
        "capabilities": ["completion", "tools"],  # any model: a generic prompt where its
                                                  # template has no tools (engine.tools.fallback)
        "modified_at": _model(server)["modified_at"],
    })


def _value(text: str) -> Any:
    """A metadata value as JSON: integers as numbers, the rest as text."""
    return int(text) if text.isdigit() else text


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
