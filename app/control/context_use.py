"""The context a conversation takes, known as soon as it is shown: the status bar's "context
115 / 4,096" for a conversation shown again, whose figure the engine no longer holds (another
conversation was answered since, its model was loaded again, its file was read without its KV
state). The worker counts its messages (engine.prompts.size) and the figure goes into the
conversation's status; a reply's own figures (live, then at its end) take over from it.
QtCore only."""

from __future__ import annotations

from PySide6.QtCore import QObject

from app.control.state import AppState
from app.engine_link.client import EngineClient
from app.engine_link.messages import Opened, Sized
from engine.conversation.tree import Conversation


class ContextUse(QObject):
    def __init__(self, client: EngineClient, state: AppState, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.client, self.state, self.library = client, state, state.library
        self.library.subscribe(self._on_library)
        state.subscribe(self._on_state)
        w = client.worker
        w.sized.connect(self.on_sized)  # methods: queued to this (the GUI's) thread
        w.opened.connect(self.on_opened)

    def measure(self, conv: Conversation | None) -> None:
        """Ask for ``conv``'s figure: one with messages, while no reply is written (a reply
        brings its own) and a model is loaded."""
        if conv is None or not conv.loaded or not conv.turns or self.state.model is None or \
                self.library.generating is not None:
            return
        self.client.size(conv.id, conv.engine_messages())

    def on_sized(self, sized: Sized) -> None:
        conv = self.library.by_id(sized.conversation_id)
        if conv is None or conv.id == self.library.generating or conv.streaming is not None:
            return  # a reply started meanwhile: its figures are the engine's own
        conv.set_status(n_past=sized.n_tokens, n_ctx=sized.n_ctx)

    def on_opened(self, opened: Opened) -> None:
        """A file read without its KV state: the conversation's messages are known now."""
        conv = self.library.current
        if not opened.restored_kv and conv is not None and conv.id == opened.conversation_id:
            self._measure_unknown(conv)

    def _on_library(self, kind: str, conv: Conversation | None) -> None:
        if kind == "current":
            self._measure_unknown(conv)

    def _measure_unknown(self, conv: Conversation | None) -> None:
        """``conv``'s figure unless the engine's own is kept (its last reply's, with this model)."""
        if conv is not None and not conv.status.n_past:
            self.measure(conv)

    def _on_state(self, what: str) -> None:
        if what == "model":  # another model (or the same again): its tokens, its context
            self.measure(self.library.current)
