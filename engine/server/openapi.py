"""The OpenAPI document of what the server accepts (``GET /openapi.json``): every route of every
dialect, request bodies from their pydantic models, the sampling fields from the parameter table
(engine.params) under each dialect's names, and each dialect's error shape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

import engine
from engine.decode.sampling import SamplingParams
from engine.params import api_properties
from engine.server import audio, embeddings, model_routes, schema
from engine.server.dialects.anthropic import messages as anthropic
from engine.server.dialects.ollama import models as ollama_models
from engine.server.dialects.ollama import routes as ollama
from engine.server.dialects.openai import responses as openai_responses
from engine.server.turn import ReplyParams

PREFIX = {"openai": "OpenAI", "responses": "Responses", "anthropic": "Anthropic", "ollama": "Ollama"}
ERRORS: dict[str, dict[str, Any]] = {
    "openai": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type"], "properties": {
            "message": {"type": "string"}, "type": {"type": "string"},
            "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}},
    "responses": {"$ref": "#/components/schemas/OpenAIError"},
    "anthropic": {"type": "object", "required": ["type", "error"], "properties": {
        "type": {"const": "error"}, "error": {
            "type": "object", "required": ["type", "message"], "properties": {
                "type": {"enum": sorted(set(anthropic.ERROR_TYPES.values()) | {"api_error"})},
                "message": {"type": "string"}}}}},
    "ollama": {"type": "object", "required": ["error"],
               "properties": {"error": {"type": "string"}}},
}


@dataclass(frozen=True)
class Operation:
    path: str
    method: str
    dialect: str
    summary: str
    body: type[BaseModel] | None = None
    params: tuple[type, ...] = ()  # the parameter classes read from the body
    auth: bool = True
    streams: bool = False  # answers server-sent events or NDJSON when asked
    any_model: bool = False  # its ``model`` field is not checked (the embeddings' routes)
    media: str = "application/json"  # the body's type
    models: tuple[str, ...] = ()  # the names its ``model`` takes, when not the chat models'


SAMPLING, REPLY = (SamplingParams,), (SamplingParams, ReplyParams)


OPERATIONS = (
    Operation("/v1/chat/completions", "post", "openai", "A chat completion (OpenAI)",
              schema.ChatCompletionRequest, REPLY, streams=True),
    Operation("/v1/completions", "post", "openai", "A text completion (OpenAI)",
              schema.CompletionRequest, SAMPLING, streams=True),
    Operation("/v1/responses", "post", "responses", "A response (OpenAI Responses)",
              openai_responses.ResponsesRequest, REPLY, streams=True),
    Operation("/v1/models", "get", "openai", "The served models, loaded or not (OpenAI)"),
    Operation("/models", "get", "openai", "The served models, loaded or not (llama-server's router)"),
    Operation("/models/load", "post", "openai", "Load a model now (llama-server's router)",
              model_routes.ModelRequest),
    Operation("/models/unload", "post", "openai", "Unload a model (llama-server's router)",
              model_routes.ModelRequest),
    Operation("/v1/messages", "post", "anthropic", "A message (Anthropic Messages)",
              anthropic.MessagesRequest, SAMPLING, streams=True),
    Operation("/v1/messages/count_tokens", "post", "anthropic",
              "The prompt's length in tokens (Anthropic Messages)", anthropic.CountRequest,
              SAMPLING),
    Operation("/api/chat", "post", "ollama", "A chat reply (Ollama)", ollama.OllamaChatRequest,
              REPLY, streams=True),
    Operation("/api/generate", "post", "ollama", "A completion of a prompt (Ollama)",
              ollama.OllamaGenerateRequest, REPLY, streams=True),
    Operation("/api/tags", "get", "ollama", "The served models (Ollama)"),
    Operation("/api/ps", "get", "ollama", "The loaded models (Ollama)"),
    Operation("/api/show", "post", "ollama", "The model's details (Ollama)",
              ollama_models.ShowRequest),
    Operation("/api/version", "get", "ollama", "The server's version", auth=False),
    Operation("/v1/embeddings", "post", "openai", "Embeddings of texts (OpenAI)",
              embeddings.EmbeddingsRequest, any_model=True),
    Operation("/api/embed", "post", "ollama", "Embeddings of texts (Ollama)",
              embeddings.OllamaEmbedRequest, any_model=True),
    Operation("/api/embeddings", "post", "ollama", "The embedding of a prompt (Ollama, older)",
              embeddings.OllamaEmbeddingsRequest, any_model=True),
    Operation("/v1/audio/transcriptions", "post", "openai", "The words spoken in an audio file (OpenAI)",
              audio.TranscriptionForm, media="multipart/form-data", models=audio.MODELS),
    Operation("/v1/duet/stats", "get", "openai", "The engine's counters (Duet)"),
    Operation("/health", "get", "openai", "Whether the server is up (Duet)", auth=False),
    Operation("/openapi.json", "get", "openai", "This document", auth=False),
)


def document(model_ids: Sequence[str], n_ctx: int) -> dict[str, Any]:
    """The document for a server of the models ``model_ids`` (which also answer to their
    aliases) whose context is ``n_ctx`` tokens."""
    components: dict[str, Any] = {f"{PREFIX[d]}Error": s for d, s in ERRORS.items()}
    paths: dict[str, Any] = {}
    for op in OPERATIONS:
        entry: dict[str, Any] = {
            "summary": op.summary, "operationId": _operation_id(op),
            "tags": [PREFIX[op.dialect] if op.path != "/health" else "Duet"],
            "responses": {"200": {"description": _answer(op)},
                          "default": {"description": "A refusal, in the dialect's shape",
                                      "content": {"application/json": {"schema": {
                                          "$ref": f"#/components/schemas/{PREFIX[op.dialect]}Error"}}}}}}
        if not op.auth:
            entry["security"] = []
        elif op.dialect == "anthropic":
            entry["security"] = [{"apiKey": []}, {"bearer": []}]
        if op.body is not None:
            name = _body_schema(op, components, model_ids, n_ctx)
            entry["requestBody"] = {"required": True, "content": {op.media: {
                "schema": {"$ref": f"#/components/schemas/{name}"}}}}
        paths.setdefault(op.path, {})[op.method] = entry
    return {
        "openapi": "3.1.0",
        "info": {"title": "Duet", "version": engine.version(),
                 "description": "A local language model server that speaks the OpenAI (chat "
                                "completions and Responses), Anthropic Messages and Ollama APIs."},
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"}}},
        "security": [{"bearer": []}],
    }


def _operation_id(op: Operation) -> str:
    words = op.path.strip("/").replace(".", "/").replace("_", "/").split("/")
    return op.dialect + "".join(w.capitalize() for w in words if w not in ("v1", "api"))


def _answer(op: Operation) -> str:
    if not op.streams:
        return "The answer"
    kind = "NDJSON lines (stream defaults to true)" if op.dialect == "ollama" else \
        "server-sent events when stream is true"
    return f"The reply: one JSON body, or {kind}"


def _body_schema(op: Operation, components: dict[str, Any], model_ids: Sequence[str],
                 n_ctx: int) -> str:
    """Puts the schema of ``op``'s body (and the models it uses) into ``components``; returns
    its name there. The sampling fields come from the parameter table."""
    prefix = PREFIX[op.dialect]
    assert op.body is not None
    body = op.body.model_json_schema(ref_template=f"#/components/schemas/{prefix}{{model}}")
    for name, sub in body.pop("$defs", {}).items():
        components[f"{prefix}{name}"] = sub
    props = body.setdefault("properties", {})
    names = [n for m in model_ids for n in ((m, f"{m}:latest") if op.dialect == "ollama" else (m,))]
    for key in ("model", "name"):
        if key in props and op.models:
            props[key] = {"enum": list(op.models)}
        elif key in props and op.any_model:
            props[key]["description"] = "Any name: the embedding model is the server's own"
        elif key in props:
            props[key] = {"anyOf": [{"enum": names}, {"type": "null"}]} if key not in \
                body.get("required", ()) else {"enum": names}
    required = body.get("required", ())
    for cls in op.params:
        fields = {k: v if k in required else _nullable(v)
                  for k, v in api_properties(cls, op.dialect).items()}
        if cls is SamplingParams and op.dialect == "ollama":  # in options
            props["options"] = {"anyOf": [_options(fields, n_ctx), {"type": "null"}],
                                "description": "Sampling, as Ollama names it"}
        else:
            props.update(fields)
    cls_name = op.body.__name__  # named once for its dialect (OllamaChatRequest), else prefixed
    name = cls_name if cls_name.startswith(prefix) else f"{prefix}{cls_name}"
    components[name] = body
    return name


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """A parameter's property that also takes null ("not set", as engine.params.read has it)."""
    if "anyOf" in prop:
        return {**prop, "anyOf": [*prop["anyOf"], {"type": "null"}]}
    return {**prop, "type": [prop["type"], "null"]}


def _options(sampling: dict[str, Any], n_ctx: int) -> dict[str, Any]:
    props = dict(sampling)
    props["num_predict"] = {"anyOf": [props["num_predict"], {"enum": [-1, -2]}],
                            "description": "Longest reply, in tokens (-1: no limit, -2: fill "
                                           "the context; both end where the context does)"}
    props["num_ctx"] = {"type": ["integer", "null"], "maximum": n_ctx,
                        "description": "At most the server's context"}
    props.update({name: {"enum": [values[0], None]}
                  for name, values in ollama.NEUTRAL_OPTIONS.items()})
    props.update({name: {"description": "No effect on the reply"}
                  for name in sorted(ollama.LOAD_OPTIONS | ollama.NO_EFFECT)})
    return {"type": "object", "properties": props, "additionalProperties": False}
