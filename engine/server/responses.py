"""OpenAI-shaped response bodies and stream chunks, from the engine's ``Done`` and ``Stats``.

``timings`` follows llama-server (prompt_n counts the prompt tokens actually decoded, cache_n the
ones reused), so dashboards written for it read Duet's numbers unchanged.
"""

from __future__ import annotations

import json
import time
import uuid

from engine.events import Done, Stats

FINISH = {"stop": "stop", "length": "length", "context_full": "length", "cancelled": "stop"}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(s: Stats) -> dict:
    return {"prompt_tokens": s.n_prompt_tokens, "completion_tokens": s.n_tokens,
            "total_tokens": s.n_prompt_tokens + s.n_tokens,
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


class Shaper:
    """Builds the bodies of one request (chat or text completion) with one id and timestamp."""

    def __init__(self, kind: str, model: str) -> None:
        self.chat = kind == "chat"
        self.id = new_id("chatcmpl" if self.chat else "cmpl")
        self.created = int(time.time())
        self.model = model

    def _base(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": "duet"}

    def full(self, done: Done) -> dict:
        body = self._base("chat.completion" if self.chat else "text_completion")
        reason = FINISH[done.reason]
        choice = ({"index": 0, "message": {"role": "assistant", "content": done.text},
                   "logprobs": None, "finish_reason": reason} if self.chat else
                  {"index": 0, "text": done.text, "logprobs": None, "finish_reason": reason})
        body.update(choices=[choice], usage=usage(done.stats), timings=timings(done.stats))
        return body

    def chunk(self, text: str | None = None, *, finish: str | None = None, role: bool = False) -> dict:
        body = self._base("chat.completion.chunk" if self.chat else "text_completion")
        if self.chat:
            delta: dict = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        body["choices"] = [choice]
        return body

    def final_chunk(self, done: Done) -> dict:
        body = self.chunk(finish=FINISH[done.reason])
        body["timings"] = timings(done.stats)
        return body

    def usage_chunk(self, done: Done) -> dict:
        body = self._base("chat.completion.chunk" if self.chat else "text_completion")
        body.update(choices=[], usage=usage(done.stats))
        return body


def sse(obj: dict | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data: {data}\n\n".encode("utf-8")
