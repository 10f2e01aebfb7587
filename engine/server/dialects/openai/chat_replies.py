"""OpenAI-shaped response bodies and stream chunks, from the engine's ``Done`` and ``Stats``.

``timings`` follows llama-server (prompt_n counts the prompt tokens actually decoded, cache_n the
ones reused), so dashboards written for it read Duet's numbers unchanged. ``logprobs`` are the
target's own (engine.events.Logprob: before the penalties, the sampling chain and the grammar).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from engine.chat.messages import ToolCall
from engine.events import Done, Stats, Token
from engine.server.errors import ApiError
from engine.server.turn import End, Text


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(s: Stats) -> dict:
    return {"prompt_tokens": s.n_prompt_tokens, "completion_tokens": s.n_completion,
            "total_tokens": s.n_prompt_tokens + s.n_completion,
            "prompt_tokens_details": {"cached_tokens": s.n_cached_tokens}}


def timings(s: Stats) -> dict:
    prompt_n = s.n_prompt_tokens - s.n_cached_tokens
    return {
        "cache_n": s.n_cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": round(s.prompt_s * 1000, 3),
        "prompt_per_token_ms": round(s.prompt_s * 1000 / prompt_n, 3) if prompt_n else 0.0,
        "prompt_per_second": round(prompt_n / s.prompt_s, 3) if s.prompt_s > 0 else 0.0,
        "predicted_n": s.n_tokens,
        "predicted_ms": round(s.gen_s * 1000, 3),
        "predicted_per_token_ms": round(s.gen_s * 1000 / s.n_tokens, 3) if s.n_tokens else 0.0,
        "predicted_per_second": round(s.tokens_per_s, 3),
        "draft_n": s.proposed,
        "draft_n_accepted": s.accepted,
    }


def call_json(call: ToolCall, index: int | None = None) -> dict:
    out: dict[str, Any] = {"id": call.id, "type": "function",
                           "function": {"name": call.name, "arguments": call.arguments}}
    if index is not None:
        out["index"] = index
    return out


class OpenAIShaper:
    """Builds the bodies of one request (chat or text completion) with one id and timestamp."""

    media_type = "text/event-stream"

    def __init__(self, kind: str, model_id: str, model: Any, include_usage: bool = False,
                 fingerprint: str = "duet") -> None:
        self.chat = kind == "chat"
        self.include_usage = include_usage  # a last chunk with the usage, when streamed
        self.id = new_id("chatcmpl" if self.chat else "cmpl")
        self.created = int(time.time())
        self.model_id = model_id
        self.model = model  # engine.llama.model.Model: token texts for logprobs
        self.fingerprint = fingerprint  # the build, and whether the reply is exact
        self._calls = 0  # tool calls streamed so far (their indices)
        self._offset = 0  # text offset of the next token (legacy logprobs)

    def _base(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_id,
                "system_fingerprint": self.fingerprint}

    # -- whole replies --------------------------------------------------------------------
    def whole(self, text: str, calls: Sequence[ToolCall], tokens: Sequence[Token],
              end: End, reasoning: str = "") -> dict:
        body = self._base("chat.completion" if self.chat else "text_completion")
        lp = self.logprobs(tokens) if tokens else None
        if self.chat:
            message: dict[str, Any] = {"role": "assistant",
                                       "content": text if text or not calls else None}
            if reasoning:  # as llama-server's --reasoning-format deepseek
                message["reasoning_content"] = reasoning
            if calls:
                message["tool_calls"] = [call_json(c) for c in calls]
            choice = {"index": 0, "message": message, "logprobs": lp, "finish_reason": end.finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": lp, "finish_reason": end.finish}
        body.update(choices=[choice], usage=usage(end.done.stats), timings=timings(end.done.stats))
        return body

    # -- the stream (engine.server.shape.Shaper) ---------------------------------------------
    def start(self) -> list[bytes]:
        return [sse(self.chunk(role=True))] if self.chat else []

    def text(self, piece: Text) -> list[bytes]:
        if piece.thinking:
            return [sse(self.chunk(reasoning=piece.text, tokens=piece.tokens))]
        return [sse(self.chunk(piece.text, tokens=piece.tokens))]

    def call(self, call: ToolCall) -> list[bytes]:
        return [sse(c) for c in self.call_chunks(call)]

    def end(self, end: End) -> list[bytes]:
        body = self.chunk(finish=end.finish)
        body["timings"] = timings(end.done.stats)
        out = [sse(body)]
        if self.include_usage:
            out.append(sse(self.usage_chunk(end.done)))
        return [*out, sse("[DONE]")]

    def failed(self, error: ApiError) -> list[bytes]:
        return [sse(error.body())]

    def chunk(self, text: str | None = None, *, finish: str | None = None, role: bool = False,
              tokens: Sequence[Token] = (), reasoning: str | None = None) -> dict:
        body = self._base("chat.completion.chunk" if self.chat else "text_completion")
        lp = self.logprobs(tokens) if tokens else None
        if self.chat:
            delta: dict = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            if reasoning is not None:
                delta["reasoning_content"] = reasoning
            choice = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": lp, "finish_reason": finish}
        body["choices"] = [choice]
        return body

    def call_chunks(self, call: ToolCall) -> list[dict]:
        """A tool call as OpenAI streams one: its id and name, then its arguments."""
        index = self._calls
        self._calls += 1
        head = {"index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}
        args = {"index": index, "function": {"arguments": call.arguments}}
        return [self._delta({"tool_calls": [head]}), self._delta({"tool_calls": [args]})]

    def _delta(self, delta: dict) -> dict:
        body = self._base("chat.completion.chunk")
        body["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]
        return body

    def usage_chunk(self, done: Done) -> dict:
        body = self._base("chat.completion.chunk" if self.chat else "text_completion")
        body.update(choices=[], usage=usage(done.stats))
        return body

    # -- logprobs -------------------------------------------------------------------------
    def logprobs(self, tokens: Sequence[Token]) -> dict:
        if self.chat:
            return {"content": chat_logprobs(self.model, tokens)}
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                "text_offset": []}
        for t in tokens:
            piece = self._text(t.id)
            out["tokens"].append(piece)
            out["token_logprobs"].append(t.logprob.logprob if t.logprob else None)
            out["top_logprobs"].append({self._text(i): lp for i, lp in t.logprob.top}
                                       if t.logprob else None)
            out["text_offset"].append(self._offset)
            self._offset += len(piece)
        return out

    def _text(self, token: int) -> str:
        return self.model.piece(token).decode("utf-8", "replace")


def chat_logprobs(model: Any, tokens: Sequence[Token]) -> list[dict]:
    """The entries of chat replies (OpenAI's ``logprobs.content``, Ollama's ``logprobs``)."""
    return [logprob_entry(model, t) for t in tokens]


def logprob_entry(model: Any, t: Token) -> dict:
    """A token's log-probability and its alternatives, as OpenAI's chat completions and its
    Responses API both give them."""
    lp = t.logprob
    assert lp is not None
    return {**_token(model, t.id, lp.logprob),
            "top_logprobs": [_token(model, i, v) for i, v in lp.top]}


def _token(model: Any, token: int, logprob: float) -> dict:
    raw = model.piece(token)
    return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}


def sse(obj: dict | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data: {data}\n\n".encode()
