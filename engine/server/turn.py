"""The server's side of a chat request (engine.prompts.request holds the request itself, shared with
the window and the command line): the reply parameters of the table, reading the sampling
fields of a body, refusals as 400s naming the dialect's field, and a turn's events as an async
stream of pieces for the dialects to shape."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from engine import params
from engine.decode.sampling import SamplingParams
from engine.errors import DuetError
from engine.events import Token
from engine.llama.model import Model
from engine.params import Params, param
from engine.prompts.request import Call, Chat, End, Piece, Policy, PreparedTurn, Raw, Reader, RequestError, Text
from engine.prompts.request import prepare as prepare_request
from engine.prompts.request import prepare_raw as prepare_raw_request
from engine.server.errors import ApiError, bad_request

__all__ = ["Call", "Chat", "End", "Piece", "ReplyParams", "Raw", "Text", "PreparedTurn", "collect", "pieces",
           "client_turn", "client_raw_turn", "reply_params", "sampling"]


@dataclass(frozen=True)
class ReplyParams(Params):
    """What a reply reports besides its text (rows of the parameter table)."""

    logprobs: bool = param(False, "Log-probabilities", "Return each token's log-probability.",
                           api={"openai": ("logprobs",), "ollama": ("logprobs",)}, cli=None)
    top_logprobs: int = param(0, "Top log-probabilities", "How many of the most likely tokens "
                              "to return at each position, with their log-probabilities.",
                              minimum=0, maximum=20, api={"openai": ("top_logprobs",),
                                                          "ollama": ("top_logprobs",),
                                                          "responses": ("top_logprobs",)},
                              cli=None)


def client_turn(model: Model, chat: Chat, n_ctx: int | None = None) -> PreparedTurn:
    """engine.prompts.request.prepare for a client's chat: nothing is left out to fit (a prompt that
    does not fit ``n_ctx`` is refused; without it, not checked), every refusal a 400."""
    try:
        return prepare_request(model, chat, Policy(n_ctx or 1 << 62, drop_oldest=False))
    except RequestError as e:
        raise ApiError(400, str(e), param=e.field, code=e.code) from None
    except DuetError as e:  # a template that fails
        raise bad_request(str(e), chat.param_names.get("messages", "messages")) from None


def client_raw_turn(model: Model, raw: Raw, n_ctx: int) -> PreparedTurn:
    """engine.prompts.request.prepare_raw, every refusal a 400."""
    try:
        return prepare_raw_request(model, raw, n_ctx)
    except RequestError as e:
        raise ApiError(400, str(e), param=e.field, code=e.code) from None


def sampling(data: dict[str, Any], dialect: str, defaults: SamplingParams) -> SamplingParams:
    try:
        return params.read(SamplingParams, data, dialect, defaults)
    except params.ParamError as e:
        raise bad_request(str(e), e.api_name) from None


def reply_params(data: dict[str, Any], dialect: str) -> ReplyParams:
    try:
        return params.read(ReplyParams, data, dialect, ReplyParams())
    except params.ParamError as e:
        raise bad_request(str(e), e.api_name) from None


# -- the reply, as pieces -----------------------------------------------------------------
async def pieces(items: AsyncIterator[object], turn: PreparedTurn) -> AsyncIterator[Piece]:
    """The engine's events for ``turn`` as text, calls and the end (engine.prompts.request.Reader);
    text pieces with neither text nor log-probabilities are left out."""
    reader = Reader(turn)
    async for item in items:
        for p in reader.feed(item):
            if isinstance(p, Text) and not p.text and not p.tokens:
                continue
            yield p
            if isinstance(p, End):
                return


async def collect(stream: AsyncIterator[Piece]) -> tuple[str, list[Any], list[Token], End, str]:
    """A whole reply: (text, calls, tokens with log-probabilities, end, reasoning: the text of
    a reasoning model's thinking)."""
    text: list[str] = []
    thought: list[str] = []
    calls: list[Any] = []
    tokens: list[Token] = []
    async for p in stream:
        if isinstance(p, Text):
            (thought if p.thinking else text).append(p.text)
            tokens.extend(p.tokens)
        elif isinstance(p, Call):
            calls.append(p.call)
        else:
            return "".join(text), calls, tokens, p, "".join(thought)
    raise asyncio.CancelledError  # the stream ended without its end: the server is stopping
