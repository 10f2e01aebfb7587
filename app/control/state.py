"""The app's state, without Qt (as napari's ViewerModel is its viewer's): the conversations
(engine.conversation.library.Library), the loaded model, a load or a fetch under way, the notice
above the chat, the page shown, the verify-cost measurement, and the settings that wait for the
next load. Controllers change it through its methods; the views subscribe and follow each change
(``subscribe``), so nothing updates a view by hand and no decision reads a widget."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from app.engine_link.messages import LoadedModel
from engine.conversation.library import Library

# What changed: "choice", "loading", "model", "refused", "pending_reload", "notice", "page",
# "fetching", "fetch_progress", "measuring", "typed_ahead" or "message"
Listener = Callable[[str], None]


COMPLETION_ONLY = ("{} has no chat template: it is a base model, completion only. It "
                   "continues your messages as one text (a raw prompt) rather than answering them.")


@dataclass(frozen=True)
class Notice:
    """The one-line notice above the chat, with an offer (``action``, its ``callback``) if any.
    ``scope``: the id of the conversation it is about (shown with it, kept until replaced or
    dismissed), or None for one about the app (models, settings, files, imports), which goes
    when another conversation is shown unless ``until_load`` (those go at the next load)."""

    text: str
    kind: Literal["info", "error"] = "info"
    action: str | None = None
    callback: Callable[[], None] | None = None
    until_load: bool = False
    scope: str | None = None


class AppState:
    def __init__(self, library: Library | None = None) -> None:
        self.library = library or Library()
        self.model: LoadedModel | None = None
        self.choice: tuple[Path | None, Path | None] = (None, None)  # target and draft picked
        self.starters_here = False  # the starter models are in the models folder (first run)
        self.loading: Path | None = None  # the target being loaded
        self.load_error: str | None = None  # why the last load failed (None: it did not)
        self.refused: tuple[Path, ...] = ()  # files the last choice could not load
        self.pending_reload: frozenset[str] = frozenset()  # settings waiting for the next load
        self.recalling = False  # the settings change to a chosen model's remembered ones
        self.notice: Notice | None = None  # the app's
        self.conversation_notices: dict[str, Notice] = {}  # by conversation id
        self._said = itertools.count()
        self._when: dict[str | None, int] = {}  # scope → when its notice was said
        self.library.subscribe(self._on_library)
        self.page: Literal["chat", "first_run"] = "chat"
        self.fetching = False
        self.fetch_progress: tuple[int, int, str] = (0, 0, "")  # done, total, what
        self.measuring: tuple[int, int] | None = None  # the verify cost's measurement: done, total
        self.message: tuple[str, int] = ("", 0)  # a passing status line and how long it shows (ms)
        # tokens of the prompt of the message being typed read ahead, of its tokens (None: none)
        self.typed_ahead: tuple[int, int] | None = None
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    @property
    def can_chat(self) -> bool:
        """A reply can be asked for: a model is loaded, or loading (the request waits for it)."""
        return self.model is not None or self.loading is not None

    # -- models ------------------------------------------------------------------------------
    def choose(self, target: Path | None, draft: Path | None) -> None:
        """The models bar shows ``target`` and ``draft`` as the choice (nothing loads)."""
        self.choice = (target, draft)
        self._emit("choice")

    def load_started(self, target: Path) -> None:
        self.loading, self.load_error, self.page = target, None, "chat"
        self._emit("page")
        self._emit("loading")

    def loaded(self, model: LoadedModel) -> None:
        """``model`` is loaded: what waited for a load applies now."""
        self.loading, self.model, self.pending_reload = None, model, frozenset()
        self.measuring = (0, 0) if model.measuring else None
        if self.notice is not None and (self.notice.kind == "info" or self.notice.until_load):
            self._app_notice(None)
        if model.draft_problem:
            self._app_notice(Notice(f"The draft model was not used: {model.draft_problem}. "
                                    f"Drafting with: {model.drafter}."))
        elif not model.chats:
            self._app_notice(Notice(COMPLETION_ONLY.format(model.target_name), until_load=True))
        self._emit("model")
        self._emit("measuring")
        self._emit("notice")

    def load_failed(self, message: str, notice: Notice) -> None:
        """A load failed or was cancelled: the models it replaced are gone too."""
        self.loading, self.model, self.load_error, self.measuring = None, None, message, None
        self._app_notice(notice)
        self._emit("model")
        self._emit("measuring")
        self._emit("notice")

    def refuse(self, paths: tuple[Path, ...], notice: Notice) -> None:
        """A choice that cannot load (``paths``: its files that are no models): what is loaded stays."""
        self.refused = paths
        self._app_notice(notice)
        self.choice = (self.model.target_path, self.model.draft_path) if self.model else (None, None)
        self._emit("refused")
        self._emit("choice")
        self._emit("notice")

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

    # -- what the window shows ---------------------------------------------------------------
    def say(self, notice: Notice | None) -> None:
        """Show ``notice`` (None: take the app's away)."""
        if notice is None or notice.scope is None:
            self._app_notice(notice)
        else:
            self.conversation_notices[notice.scope] = notice
            self._when[notice.scope] = next(self._said)
        self._emit("notice")

    def _app_notice(self, notice: Notice | None) -> None:
        self.notice = notice
        self._when[None] = next(self._said)

    def tell(self, text: str, kind: str = "info") -> None:
        """A notice about no conversation in particular (a slot for signals, other threads'
        included: they arrive queued)."""
        self.say(Notice(text, "error" if kind == "error" else "info"))

    def unsay(self, scope: str | None) -> None:
        """Take the notice of ``scope`` away (a conversation's id; None: the app's)."""
        if scope is None:
            if self.notice is not None:
                self.say(None)
        elif self.conversation_notices.pop(scope, None) is not None:
            self._emit("notice")

    def notice_for(self, conversation_id: str | None) -> Notice | None:
        """What the notice bar shows with conversation ``conversation_id`` shown: of its notice
        and the app's, an error before an info, else the later said."""
        own = self.conversation_notices.get(conversation_id) if conversation_id else None
        candidates = [(n.kind == "error", self._when.get(n.scope, -1), n)
                      for n in (own, self.notice) if n is not None]
        return max(candidates, key=lambda c: c[:2])[2] if candidates else None

    def _on_library(self, kind: str, _conv: object) -> None:
        if kind == "current" and self.notice is not None and not self.notice.until_load:
            self.say(None)  # another conversation shown: the app's passing notice goes

    def show_page(self, page: Literal["chat", "first_run"]) -> None:
        self.page = page
        self._emit("page")

    def set_fetching(self, on: bool) -> None:
        self.fetching = on
        if on:
            self.page = "first_run"
            self._emit("page")
        self._emit("fetching")

    def fetch_progressed(self, done: int, total: int, text: str) -> None:
        self.fetch_progress = (done, total, text)
        self._emit("fetch_progress")

    def measured(self, done: int, total: int, text: str = "") -> None:
        """The verify cost's measurement went on: ``done`` of ``total`` (all: it ended, ``text`` says how)."""
        self.measuring = (done, total) if done < total else None
        self._emit("measuring")
        if self.measuring is None and text:
            self.show_message(text, 8000)

    def read_ahead(self, figure: tuple[int, int] | None) -> None:
        """``(held, total)``: the tokens of the prompt being typed that are read (None: none,
        or it was sent)."""
        if figure != self.typed_ahead:
            self.typed_ahead = figure
            self._emit("typed_ahead")

    def show_message(self, text: str, ms: int = 3000) -> None:
        self.message = (text, ms)
        self._emit("message")

    def _emit(self, what: str) -> None:
        for listener in list(self._listeners):
            listener(what)
