"""Embeddings for other programs' retrieval: OpenAI's ``POST /v1/embeddings`` (``float`` and
``base64``, one input or a batch, text or token ids) and Ollama's ``/api/embed`` and older
``/api/embeddings``, as llama-server (``--embeddings``), LM Studio and Ollama answer them.

The vectors come from an embedding model when the server was given one (``--embedding-model``,
the catalog's ``embed``: all-MiniLM-L6-v2), else from the chat model's hidden states, mean-pooled
(llama-server's ``--pooling mean``; the model the request names, the default one if it names
none the server has), and the answer's ``model`` says which. An
``engine.documents.embeddings.Embedder`` made at the first request runs them: the chat model's on
its engine's thread between two steps of the replies, the embedding model's on a thread of its
own.
"""

from __future__ import annotations

import base64
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.documents.embeddings import EmbeddingSource
from engine.errors import DuetError
from engine.server import schema
from engine.server.core import Front, ServedModel
from engine.server.errors import ApiError, bad_request

MAX_INPUTS = 2048  # OpenAI's limit on one request's inputs


class EmbeddingsRequest(schema._Body):
    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


class OllamaEmbedRequest(schema._Body):
    model: str | None = None
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = None
    options: dict[str, Any] | None = None
    keep_alive: Any = None


class OllamaEmbeddingsRequest(schema._Body):
    model: str | None = None
    prompt: str
    options: dict[str, Any] | None = None
    keep_alive: Any = None


class Vectors:
    """Where a request's vectors come from (engine.documents.embeddings.EmbeddingSource), and
    what the answers call them."""

    def __init__(self, source: EmbeddingSource, name: str) -> None:
        self.source, self.name = source, name

    @classmethod
    def of_chat_model(cls, server: ServedModel) -> Vectors:
        """``server``'s model's hidden states, mean-pooled, on its engine's thread."""
        source = EmbeddingSource(server.model, None, lambda fn: server.engine.call(fn).result())
        return cls(source, f"{server.model_id} (mean-pooled chat model: no embedding model loaded)")

    @classmethod
    def of_file(cls, path: Path) -> Vectors:
        """An embedding model of its own, loaded at its first use and run on a thread of its own
        (its context is nobody else's)."""
        worker = ThreadPoolExecutor(1, thread_name_prefix="duet-embed")
        return cls(EmbeddingSource(None, path, lambda fn: worker.submit(fn).result()), path.stem)

    async def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """The vectors of ``texts`` (rows), and the tokens they took."""
        try:
            return await run_in_threadpool(self.source.embed_counted, texts)
        except DuetError as e:
            raise bad_request(str(e), "input") from None

    def detokenize(self, ids: list[int]) -> str:
        """Token ids sent as input, read as the embedding model's own tokens (as llama-server)."""
        model = self.source.model
        if any(not 0 <= t < model.n_vocab for t in ids):
            raise bad_request(f"input: token ids must be between 0 and {model.n_vocab - 1}", "input")
        return str(model.detokenize(ids))


async def _vectors(request: Request, name: str | None) -> Vectors:
    """The embedding model when the server has one (whatever ``name`` says, as before it served
    several models); else the named chat model's (an unknown name or none: the default's)."""
    own: Vectors | None = request.app.state.vectors
    if own is not None:
        return own
    front: Front = request.app.state.duet
    known = name is not None and any(o.answers_to(name) for o in front.pool.offers)
    server = await front.pick(request, name if known else None)
    if server.vectors is None:
        server.vectors = Vectors.of_chat_model(server)
    vectors: Vectors = server.vectors
    return vectors


def _texts(body: EmbeddingsRequest, vectors: Vectors) -> list[str]:
    raw = body.input
    if isinstance(raw, str):
        items: list[Any] = [raw]
    elif raw and all(isinstance(x, int) for x in raw):
        items = [raw]  # one input as token ids
    else:
        items = list(raw)
    if not items:
        raise bad_request("input must not be empty", "input")
    if len(items) > MAX_INPUTS:
        raise bad_request(f"input: at most {MAX_INPUTS} inputs in one request", "input")
    texts = [x if isinstance(x, str) else vectors.detokenize(list(x)) for x in items]
    if any(not t for t in texts):
        raise bad_request("input: an input is empty", "input")
    return texts


def _check_dimensions(dimensions: int | None, vectors: np.ndarray) -> None:
    if dimensions is not None and dimensions != vectors.shape[1]:
        raise ApiError(400, f"dimensions: this model's vectors have {vectors.shape[1]} "
                            "dimensions; it cannot give others", param="dimensions",
                       code="unsupported_parameter")


async def openai_embeddings(request: Request) -> Response:
    front = Front.checked(request)
    body = schema.parse(EmbeddingsRequest, await front.read_json(request))
    vectors = await _vectors(request, body.model)
    texts = await run_in_threadpool(_texts, body, vectors)  # token ids: the engine's thread reads them
    rows, n_tokens = await vectors.embed(texts)
    _check_dimensions(body.dimensions, rows)
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(row.astype("<f4").tobytes()).decode()
             if body.encoding_format == "base64" else row.tolist()}
            for i, row in enumerate(rows)]
    return JSONResponse({"object": "list", "data": data, "model": vectors.name,
                         "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})


async def ollama_embed(request: Request) -> Response:
    front = Front.checked(request)
    t0 = time.perf_counter()
    body = schema.parse(OllamaEmbedRequest, await front.read_json(request))
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    if not texts or any(not t for t in texts) or len(texts) > MAX_INPUTS:
        raise bad_request(f"input: 1 to {MAX_INPUTS} texts, none empty", "input")
    vectors = await _vectors(request, _ollama_name(body.model))
    rows, n_tokens = await vectors.embed(texts)
    _check_dimensions(body.dimensions, rows)
    ns = int((time.perf_counter() - t0) * 1e9)
    return JSONResponse({"model": vectors.name, "embeddings": rows.tolist(),
                         "total_duration": ns, "load_duration": 0, "prompt_eval_count": n_tokens})


async def ollama_embeddings(request: Request) -> Response:
    front = Front.checked(request)
    body = schema.parse(OllamaEmbeddingsRequest, await front.read_json(request))
    if not body.prompt:
        return JSONResponse({"embedding": []})  # as Ollama answers an empty prompt
    rows, _ = await (await _vectors(request, _ollama_name(body.model))).embed([body.prompt])
    return JSONResponse({"embedding": rows[0].tolist()})


def _ollama_name(name: str | None) -> str | None:
    return name.removesuffix(":latest") if name is not None else None
