"""Request bodies, validated by pydantic (strict types: a string is not a number).

Fields that OpenAI clients commonly send and that Duet has no use for (``user``, ``n`` = 1, ...)
are accepted; fields Duet would have to ignore silently (``tools``, ``logprobs``, ``n`` > 1,
non-zero presence/frequency penalties, ...) are refused with a 400 that names them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.server.errors import ApiError, bad_request

MAX_STOPS = 16


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


class TextPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_Body):
    role: str
    content: str | list[TextPart] | None = None
    name: str | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    """What chat and text completions share."""

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0, lt=1)
    repeat_penalty: float | None = Field(default=None, gt=0, le=10)  # llama.cpp's extension
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    user: str | None = None

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        if len(stops) > MAX_STOPS:
            raise bad_request(f"at most {MAX_STOPS} stop strings", "stop")
        return tuple(s for s in stops if s)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatRequest(_Sampling):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int]

    def limit(self) -> int | None:
        return self.max_tokens


# Fields refused unless they hold their neutral value (Duet would otherwise ignore them).
NEUTRAL: dict[str, Any] = {
    "presence_penalty": 0, "frequency_penalty": 0, "n": 1, "logprobs": (None, False),
    "top_logprobs": (None, 0), "tools": (None, []), "tool_choice": (None, "none"),
    "functions": (None, []), "function_call": (None, "none"), "logit_bias": (None, {}),
    "echo": (None, False), "suffix": (None, ""), "best_of": (None, 1),
    "response_format": (None, {"type": "text"}),
}


def _is_type_tag(part: object) -> bool:
    """pydantic names the member of a union in an error's location ("stop.str"): not a field."""
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool", "none"))


def parse(cls: type[_Body], data: Any) -> Any:
    """Validate a decoded JSON body as ``cls``; a 400 naming the first bad field otherwise."""
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object")
    try:
        body = cls.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        param = ".".join(str(p) for p in err["loc"] if not _is_type_tag(p)) or None
        raise bad_request(f"{param}: {err['msg']}" if param else err["msg"], param) from None
    for name, neutral in NEUTRAL.items():
        if name not in data:
            continue
        allowed = neutral if isinstance(neutral, tuple) else (neutral,)
        if data[name] not in allowed:
            raise ApiError(400, f"{name} is not supported by this server (only {allowed[-1]!r})",
                           param=name, code="unsupported_parameter")
    return body

