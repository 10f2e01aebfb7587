"""The GUI side of the engine worker: owns the QThread, sends requests, holds the Stop events.

All methods are called on the GUI thread and return at once; results arrive through the
worker's signals (``client.worker.tokens`` and so on), delivered queued on the GUI thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal

from app.engine_link.messages import (
    ChatRequest,
    FetchRequest,
    LoadRequest,
    OpenRequest,
    ReadAheadRequest,
    RescuePlan,
    SaveRequest,
    SizeRequest,
    TypingRequest,
)
from app.engine_link.relay import save_cut
from app.engine_link.worker import EngineWorker
from engine.chat.messages import Image, Message, ToolCall
from engine.decode.sampling import SamplingParams
from engine.runtime.pool import MAX_LOADED
from engine.runtime.runtime import RuntimeConfig
from engine.tools import Tool

log = logging.getLogger(__name__)


class EngineClient(QObject):
    _load = Signal(object)
    _chat = Signal(object)
    _save = Signal(object)
    _open = Signal(object)
    _fetch = Signal(object)
    _read_ahead = Signal(object)
    _read_typing = Signal(object)
    _size = Signal(object)

    def __init__(self, parent: QObject | None = None, worker: EngineWorker | None = None) -> None:
        super().__init__(parent)
        self.worker = worker or EngineWorker()
        self._thread = QThread()
        self._thread.setObjectName("duet-engine")
        self.worker.moveToThread(self._thread)
        self._load.connect(self.worker.load)
        self._chat.connect(self.worker.chat)
        self._save.connect(self.worker.save)
        self._open.connect(self.worker.open)
        self._fetch.connect(self.worker.fetch)
        self._read_ahead.connect(self.worker.read_ahead)
        self._read_typing.connect(self.worker.read_typing)
        self._size.connect(self.worker.size)
        self._cancels: dict[str, list[threading.Event]] = {"chat": [], "fetch": [], "load": []}
        self._thread.start()

    # -- requests --------------------------------------------------------------------------
    def load(self, config: RuntimeConfig, keep: int = MAX_LOADED, *,
             fresh: bool = False) -> LoadRequest:
        """Load ``config``'s models (kept loaded with those used before, ``keep`` in all), or
        switch to them when they are kept (``fresh``: load them again all the same)."""
        req = LoadRequest(config, keep, fresh=fresh)
        self._remember("load", req.cancel)
        self._load.emit(req)
        return req

    def chat(self, conversation_id: str, messages: Sequence[Message],
             sampling: SamplingParams, *, continue_text: str | None = None,
             rescue: RescuePlan | None = None, speculate: bool = True,
             tools: tuple[Tool, ...] = (), read_calls: bool = True,
             thinking: bool | None = None) -> ChatRequest:
        req = ChatRequest(conversation_id, tuple(messages), sampling,
                          continue_text=continue_text, rescue=rescue, speculate=speculate,
                          tools=tools, read_calls=read_calls, thinking=thinking)
        self.worker.typing_latest = None  # typed prompts still queued are not read: this is sent
        self._remember("chat", req.cancel)
        self._chat.emit(req)
        return req

    def read_ahead(self, conversation_id: str, messages: Sequence[Message], tools: tuple[Tool, ...],
                   call: ToolCall) -> None:
        self._read_ahead.emit(ReadAheadRequest(conversation_id, tuple(messages), tools, call))

    def read_typing(self, conversation_id: str, messages: Sequence[Message] | None,
                    sampling: SamplingParams = SamplingParams(), tools: tuple[Tool, ...] = (),
                    thinking: bool | None = None) -> None:
        """Read ahead the prompt ``messages`` make (None: stop reading ahead)."""
        req = TypingRequest(conversation_id, tuple(messages) if messages is not None else None,
                            sampling, tools, thinking)
        self.worker.typing_latest = req  # those still queued are skipped
        self._read_typing.emit(req)

    def save(self, conversation_id: str, path: Path, messages: Sequence[Message], *,
             settings: Mapping[str, Any], with_kv: bool, pictures: Sequence[Image] = ()) -> None:
        self._save.emit(SaveRequest(conversation_id, path, tuple(messages), settings, with_kv,
                                    tuple(pictures)))

    def open(self, conversation_id: str, path: Path, *, shown: bool = False) -> None:
        self._open.emit(OpenRequest(conversation_id, path, shown))

    def size(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """Count the tokens ``messages`` take in the context (``worker.sized`` answers)."""
        self._size.emit(SizeRequest(conversation_id, tuple(messages)))

    def fetch(self, keys: Sequence[str]) -> FetchRequest:
        req = FetchRequest(tuple(keys))
        self._remember("fetch", req.cancel)
        self._fetch.emit(req)
        return req

    def cancel(self, what: str = "chat") -> None:
        """Stop the running and queued replies (``what="chat"``, effective within one token),
        starter-model fetches (``"fetch"``) or model loads (``"load"``). Sets the requests'
        events from this thread."""
        for event in self._cancels[what]:
            event.set()
        self._cancels[what].clear()

    def _remember(self, what: str, event: threading.Event) -> None:
        self._cancels[what] = [e for e in self._cancels[what] if not e.is_set()]
        self._cancels[what].append(event)

    # -- what the engine thread holds, asked from the GUI thread --------------------------
    def worker_lost(self) -> str | None:
        """An RPC worker of the loaded models that went away (None: none, or nothing loaded)."""
        return self.worker.worker_lost()

    def token_counter(self) -> Callable[[str], int] | None:
        """Counts a text's tokens on the engine's thread (which owns the model: a reload cannot
        free it under the count); None while no model is loaded."""
        engine = self.worker.engine
        if engine is None:
            return None

        def count(text: str) -> int:
            return int(engine.call(lambda: len(engine.runtime.target.tokenize_text(text))).result())

        return count

    def save_cut(self, plan: RescuePlan, messages: Sequence[Message], text: str) -> bool:
        """Write the conversation of ``plan`` with its reply so far ``text``, marked as cut (text
        only, atomic, on the calling thread: it must hold even when the process ends next).
        False when no model is loaded. Raises DuetError or OSError."""
        rt = self.worker.runtime
        if rt is None or rt.closed:
            return False
        save_cut(plan, rt, tuple(messages), text)
        return True

    # -- lifetime --------------------------------------------------------------------------
    def shutdown(self, timeout_ms: int = 30_000) -> None:
        """Stop what runs, end the thread, then free the models (the thread is gone by then)."""
        if not self._thread.isRunning():
            return
        self.cancel("chat")
        self.cancel("fetch")
        self.cancel("load")
        self._thread.quit()
        if not self._thread.wait(timeout_ms):
            log.warning("the engine thread did not stop in %d ms", timeout_ms)
            return
        self.worker.close()
