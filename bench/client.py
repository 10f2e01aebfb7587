"""The benchmarks' one HTTP client, for Duet's server and llama-server alike (httpx, loopback
only; no proxy from the environment: the servers are on this machine).

``post`` sends an OpenAI-style request, streamed or not as its body says, and returns the reply
text with its finish reason, the time to its first text, and the ``timings`` and ``usage`` the
server reported. A 429 raises Busy with its ``Retry-After``; anything but a complete,
well-formed reply raises Failed (a stream must end with ``data: [DONE]``). A stream can be
dropped on purpose after a few chunks, as a client that goes away would.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.errors import DuetError

HOST = "127.0.0.1"


class Failed(DuetError):
    """Anything but a complete, well-formed reply or the documented 429."""


class Busy(Failed):
    """HTTP 429; ``retry_after`` in seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429, Retry-After {retry_after}")
        self.retry_after = retry_after


@dataclass(frozen=True)
class HttpReply:
    """A reply is its text and finish reason; the figures that come with it do not take part
    in comparing two replies."""

    text: str
    finish_reason: str | None
    ttft_s: float = field(default=0.0, compare=False)  # to the first text (non-streamed: all)
    elapsed_s: float = field(default=0.0, compare=False)
    timings: dict[str, Any] = field(default_factory=dict, compare=False)
    usage: dict[str, Any] = field(default_factory=dict, compare=False)


def post(port: int, path: str, body: dict[str, Any], *, timeout: float = 900) -> HttpReply:
    """POST ``body`` to ``path``; the reply. Raises Busy on 429, Failed on anything else wrong."""
    reply = post_dropping(port, path, body, None, timeout=timeout)
    assert reply is not None  # only a stream dropped on request has none
    return reply


def post_dropping(port: int, path: str, body: dict[str, Any], after: int | None, *,
                  timeout: float = 900) -> HttpReply | None:
    """``post``, but a stream is dropped on purpose after ``after`` content chunks (None: never),
    and then None is returned."""
    t0 = time.perf_counter()
    try:
        # closing the response's block, after a dropped stream, is the disconnect the server must notice
        with httpx.stream("POST", _url(port, path), json=body, timeout=timeout,
                          trust_env=False) as r:
            if r.status_code == 429:
                raise Busy(_retry_after(r.headers.get("Retry-After")))
            if r.status_code != 200:
                raise Failed(f"{path}: HTTP {r.status_code}: {r.read()[:200]!r}")
            if body.get("stream"):
                return _stream(path, r, after, t0)
            obj = json.loads(r.read())
        choice = obj["choices"][0]
        text = (choice.get("message") or {}).get("content") or choice.get("text") or ""
        elapsed = time.perf_counter() - t0
        return HttpReply(text, choice.get("finish_reason"), elapsed, elapsed,
                         obj.get("timings") or {}, obj.get("usage") or {})
    except (httpx.HTTPError, ValueError, LookupError, TypeError) as e:
        raise Failed(f"{path}: {type(e).__name__}: {e}") from None


def _stream(path: str, r: httpx.Response, after: int | None, t0: float) -> HttpReply | None:
    pieces: list[str] = []
    finish, ttft = None, None
    timings: dict[str, Any] = {}
    usage: dict[str, Any] = {}
    for raw in r.iter_lines():
        line = raw.strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            elapsed = time.perf_counter() - t0
            return HttpReply("".join(pieces), finish, elapsed if ttft is None else ttft, elapsed,
                             timings, usage)
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise Failed(f"{path}: error in the stream: {chunk['error']}")
        for choice in chunk.get("choices") or ():
            piece = (choice.get("delta") or {}).get("content") or choice.get("text")
            if piece:
                pieces.append(piece)
                ttft = time.perf_counter() - t0 if ttft is None else ttft
            finish = choice.get("finish_reason") or finish
        timings = chunk.get("timings") or timings
        usage = chunk.get("usage") or usage
        if after is not None and len(pieces) >= after:
            return None
    raise Failed(f"{path}: the stream ended without [DONE]")


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value or 1))
    except ValueError:
        raise Failed(f"429 with an unreadable Retry-After {value!r}") from None


def post_json(port: int, path: str, body: dict[str, Any], timeout: float = 300) -> Any:
    """POST ``body`` to ``path``: its JSON answer when it is 200, else Failed."""
    return _exchange(port, "POST", path, body, timeout)


def get_json(port: int, path: str, timeout: float = 60) -> Any:
    """GET ``path``: its JSON body when the answer is 200, else Failed."""
    return _exchange(port, "GET", path, None, timeout)


def _exchange(port: int, method: str, path: str, body: dict[str, Any] | None, timeout: float) -> Any:
    try:
        r = httpx.request(method, _url(port, path), json=body, timeout=timeout, trust_env=False)
        if r.status_code != 200:
            raise Failed(f"{path}: HTTP {r.status_code}: {r.content[:200]!r}")
        return r.json()
    except (httpx.HTTPError, ValueError) as e:
        raise Failed(f"{path}: {type(e).__name__}: {e}") from None


def _url(port: int, path: str) -> str:
    return f"http://{HOST}:{port}{path}"


def health(port: int, timeout: float = 60) -> None:
    """GET /health: 200 and status ok (Duet's server and llama-server alike), or Failed."""
    got = get_json(port, "/health", timeout)
    if not isinstance(got, dict) or got.get("status") != "ok":
        raise Failed(f"/health: {str(got)[:200]}")
