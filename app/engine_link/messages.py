"""The messages between the GUI thread and the engine worker: frozen dataclasses, both ways.

Requests are built on the GUI thread and never changed afterwards; results are built on the
worker thread and only read by the GUI. A request that can be stopped carries its own
``threading.Event``: the GUI sets it directly (the worker is busy in a loop, so a queued call
would arrive too late), and a fresh event per request means a late Stop cannot leak into the
next reply.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from engine.chat.messages import Image, Message, ToolCall
from engine.decode.sampling import SamplingParams
from engine.events import Done, Token
from engine.llama.abort import Cancel
from engine.runtime.pool import MAX_LOADED
from engine.runtime.runtime import RuntimeConfig
from engine.tools import Tool


def _frozen_mapping(obj: object, name: str) -> None:
    object.__setattr__(obj, name, MappingProxyType(dict(getattr(obj, name))))


# -- requests (GUI → worker) ------------------------------------------------------------------
@dataclass(frozen=True)
class LoadRequest:
    config: RuntimeConfig
    keep: int = MAX_LOADED  # models kept loaded, this one included (engine.runtime.pool)
    fresh: bool = False  # load it again even when it is kept (Reload, a new measurement)
    cancel: threading.Event = field(default_factory=Cancel, compare=False, repr=False)


@dataclass(frozen=True)
class RescuePlan:
    """Where and how to save the conversation if the process ends of a lost RPC worker during
    the reply: ``settings`` as a save would write them, whose ``tree`` holds the streaming reply
    as node ``node`` (its text and reason are filled in with what came before the loss)."""

    path: Path
    settings: Mapping[str, Any]
    node: int

    def __post_init__(self) -> None:
        _frozen_mapping(self, "settings")


@dataclass(frozen=True)
class ChatRequest:
    conversation_id: str
    messages: tuple[Message, ...]
    sampling: SamplingParams
    cancel: threading.Event = field(default_factory=Cancel, compare=False, repr=False)
    continue_text: str | None = None  # go on with this reply (the last message is the user's)
    rescue: RescuePlan | None = None
    speculate: bool = True  # False: no drafting for this reply (its preset's drafter is none)
    tools: tuple[Tool, ...] = ()  # the tools the model is shown (its template renders them)
    read_calls: bool = True  # False: calls are left in the text (the last reply of a round)
    thinking: bool | None = None  # a reasoning model thinks first (None: as its template does)


@dataclass(frozen=True)
class ReadAheadRequest:
    """Read the part of the next reply's prompt before ``call``'s result (``messages`` end
    with the reply that made the call) while the call waits for the person or runs."""

    conversation_id: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...]
    call: ToolCall


@dataclass(frozen=True)
class TypingRequest:
    """The person paused while writing: read the prompt that ``messages`` (the conversation
    and the message so far) make (None: read nothing more)."""

    conversation_id: str
    messages: tuple[Message, ...] | None
    sampling: SamplingParams = SamplingParams()
    tools: tuple[Tool, ...] = ()
    thinking: bool | None = None  # as the reply's (ChatRequest): the same prompt


@dataclass(frozen=True)
class SizeRequest:
    """How many tokens the conversation's ``messages`` take in the context (engine.prompts.size)."""

    conversation_id: str
    messages: tuple[Message, ...]


@dataclass(frozen=True)
class SaveRequest:
    conversation_id: str
    path: Path
    messages: tuple[Message, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    with_kv: bool = True
    pictures: tuple[Image, ...] = ()  # those of other versions too (the tree's)

    def __post_init__(self) -> None:
        _frozen_mapping(self, "settings")


@dataclass(frozen=True)
class OpenRequest:
    """``shown``: the conversation is on screen already; its saved KV state is restored only
    where the engine holds less of it (in sequence 0 or its state cache)."""

    conversation_id: str
    path: Path
    shown: bool = False


@dataclass(frozen=True)
class FetchRequest:
    keys: tuple[str, ...]
    cancel: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)


# -- results (worker → GUI) -------------------------------------------------------------------
@dataclass(frozen=True)
class LoadedModel:
    """What was loaded. ``draft_problem``: why the draft model was refused (None: it was not)."""

    target_path: Path
    target_name: str
    draft_path: Path | None
    draft_name: str | None
    drafter: str
    draft_problem: str | None
    n_ctx: int
    load_s: float
    workers: tuple[Any, ...] = ()  # engine.llama.rpc.WorkerInfo of the target's and draft's workers
    measuring: bool = False  # the verify cost is measured now, between replies (no drafting yet)
    switched: bool = False  # it was kept loaded: the window switched to it (no load)
    thinks: bool = False  # a reasoning model: its template thinks before answering
    chats: bool = True  # False: no chat template (a base model), completion only
    projector: str | None = None  # the vision projector loaded with it (None: it reads no images)


@dataclass(frozen=True)
class Progress:
    """``op``: load, calibrate, prompt, fetch, open or save; ``total`` 0 means unknown (busy
    indicator)."""

    op: str
    done: int = 0
    total: int = 0
    text: str = ""


@dataclass(frozen=True)
class TokenBatch:
    conversation_id: str
    tokens: tuple[Token, ...]
    n_past: int = 0  # tokens in the context as the batch left the engine (0: not known)
    n_ctx: int = 0

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)


@dataclass(frozen=True)
class ChatReply:
    """A finished reply with the context fill after it (read on the worker thread)."""

    conversation_id: str
    done: Done
    n_past: int
    n_ctx: int
    dropped: int = 0  # the oldest messages left out to fit the context
    shift_note: str | None = None  # why the kept turns were recomputed, not shifted
    calls: tuple[ToolCall, ...] = ()  # the tool calls the reply made (out of ``done.text``)
    sources: tuple[str, ...] = ()  # what it saw of attached files, in words (engine.documents)


@dataclass(frozen=True)
class Saved:
    conversation_id: str
    path: Path
    with_kv: bool  # whether the KV state went into the file


@dataclass(frozen=True)
class Opened:
    """A conversation read from ``path``. ``restored_kv`` False: the text was read but the cache
    will be recomputed (``note`` says why)."""

    conversation_id: str
    path: Path
    messages: tuple[Message, ...]
    settings: Mapping[str, Any]
    restored_kv: bool
    note: str | None
    model_path: Path | None
    n_past: int = 0  # tokens in the cache after a KV restore (0: none restored)
    n_ctx: int = 0

    def __post_init__(self) -> None:
        _frozen_mapping(self, "settings")


@dataclass(frozen=True)
class Sized:
    """The answer to a SizeRequest: the conversation's tokens in a context of ``n_ctx``."""

    conversation_id: str
    n_tokens: int
    n_ctx: int


@dataclass(frozen=True)
class Fetched:
    paths: tuple[Path, ...]


@dataclass(frozen=True)
class Failure:
    """A request failed; ``message`` is one line fit to show as it is."""

    op: str
    message: str
    conversation_id: str | None = None
    worker_lost: bool = False  # an RPC worker went away: the model cannot be used any more
    too_long: tuple[int | None, int] | None = None  # the message cannot fit: (its tokens, room)
    cancelled: bool = False  # stopped on request (a load's Cancel)
