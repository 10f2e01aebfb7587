"""The app's state, without Qt (as napari's ViewerModel is its viewer's): the conversations
(engine.conversation.library.Library), the loaded model, whether a load is running, and the
settings that wait for the next load. The window and the chat controller change it through its
methods and are told of each change; no decision reads a widget."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app.engine_link.messages import LoadedModel
from engine.conversation.library import Library

Listener = Callable[[str], None]  # what changed: "loading", "model" or "pending_reload"


class AppState:
    def __init__(self, library: Library | None = None) -> None:
        self.library = library or Library()
        self.model: LoadedModel | None = None
        self.loading = False
        self.pending_reload: frozenset[str] = frozenset()  # settings waiting for the next load
        self.recalling = False  # the settings change to a chosen model's remembered ones
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    @property
    def can_chat(self) -> bool:
        """A reply can be asked for: a model is loaded, or loading (the request waits for it)."""
        return self.model is not None or self.loading

    def load_started(self) -> None:
        self.loading = True
        self._emit("loading")

    def loaded(self, model: LoadedModel) -> None:
        """``model`` is loaded: what waited for a load applies now."""
        self.loading, self.model, self.pending_reload = False, model, frozenset()
        self._emit("model")

    def load_failed(self) -> None:
        """A load failed or was cancelled: the models it replaced are gone too."""
        self.loading, self.model = False, None
        self._emit("model")

    def wait_for_reload(self, name: str) -> bool:
        """Setting ``name``, which applies at a load, changed: True when it now waits for a
        reload (a model is loaded or loading), False when the next load takes it anyway."""
        if not self.can_chat:
            return False
        self.pending_reload |= {name}
        self._emit("pending_reload")
        return True

    @contextmanager
    def recalling_settings(self) -> Iterator[None]:
        """The settings changed inside belong to the model being chosen, not the loaded one."""
        self.recalling = True
        try:
            yield
        finally:
            self.recalling = False

    def _emit(self, what: str) -> None:
        for listener in list(self._listeners):
            listener(what)
