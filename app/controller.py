"""The conversations and the chat flow: send, stream, stop, regenerate, edit, save, open.

Lives on the GUI thread. It changes a ``Conversation``, tells the chat view which message to
re-render, and sends frozen requests to the worker through the ``EngineClient``; what the
worker emits comes back here (tokens, finished, saved, opened, failed).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Signal

from engine import paths

from app.chat_view import ChatView
from app.composer import Composer
from app.conversation import Conversation, RecentFiles, saved_conversations, unique_path
from app.engine_client import EngineClient
from app.notice import NoticeBar
from app.requests import Failure, Opened, Reply, Saved, TokenBatch
from app.settings import Settings
from app.sidebar import Sidebar
from app.status import StatusBar

log = logging.getLogger(__name__)

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "seed", "max_tokens")


class ChatController(QObject):
    current_changed = Signal(object)  # Conversation
    generating_changed = Signal(bool)
    model_suggested = Signal(object)  # Path of the model a reopened conversation was made with
    reply_finished = Signal(object)  # Reply (after the view and the conversation were updated)
    conversation_saved = Signal(object)  # Saved
    conversation_opened = Signal(object)  # Opened
    request_failed = Signal(object)  # Failure of a chat, save or open (after it was shown)

    def __init__(self, client: EngineClient, settings: Settings, view: ChatView,
                 composer: Composer, sidebar: Sidebar, status: StatusBar, notice: NoticeBar,
                 recent: RecentFiles, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.client, self.settings, self.view, self.composer = client, settings, view, composer
        self.sidebar, self.status, self.notice, self.recent = sidebar, status, notice, recent
        self.conversations: list[Conversation] = []
        self.current: Conversation | None = None
        self.generating: str | None = None  # id of the conversation being answered
        self.cached: str | None = None  # id of the conversation the engine's KV cache holds
        self.can_chat: Callable[[], bool] = lambda: True
        w = client.worker
        w.tokens.connect(self.on_tokens)
        w.finished.connect(self.on_finished)
        w.saved.connect(self.on_saved)
        w.opened.connect(self.on_opened)
        w.failed.connect(self.on_failed)
        w.loaded.connect(self.on_model_loaded)
        composer.send_requested.connect(self.send)
        composer.stop_requested.connect(self.stop)
        view.regenerate_requested.connect(self.regenerate)
        view.edit_requested.connect(self.edit)
        sidebar.selected.connect(self.select)
        sidebar.new_requested.connect(self.new)
        sidebar.delete_requested.connect(self.delete)

    # -- the list --------------------------------------------------------------------------
    def start(self) -> None:
        """List the saved conversations and open a new, empty one."""
        self.conversations = [Conversation(p.stem, p) for p in saved_conversations()]
        self.new()

    def by_id(self, cid: str | None) -> Conversation | None:
        return next((c for c in self.conversations if c.id == cid), None)

    def new(self) -> Conversation:
        if self.current is not None and not self.current.turns and self.current.path is None:
            return self.current  # already on an empty one
        conv = Conversation()
        self.conversations.insert(0, conv)
        self._show(conv)
        return conv

    def select(self, cid: str) -> None:
        conv = self.by_id(cid)
        if conv is None or conv is self.current:
            return
        self._show(conv)

    def _show(self, conv: Conversation) -> None:
        self.current = conv
        self.sidebar.set_conversations(self.conversations, conv.id)
        if conv.loaded:
            self.view.set_placeholder_text("Send a message to start.")
            self.view.set_conversation(conv)
            if conv.path is not None and not conv.dirty and self.cached != conv.id and \
                    self.can_chat() and self.generating is None:
                # Another conversation is in the engine's cache: restore this one's saved KV
                # state (off the GUI thread) rather than recompute its history on the next reply.
                self.client.open(conv.id, conv.path)
        else:
            self.view.set_placeholder_text(f"Opening {conv.path.name}…")
            self.view.set_conversation(None)
            self.client.open(conv.id, conv.path)
        self.current_changed.emit(conv)

    def open_path(self, path: Path) -> None:
        path = Path(path).resolve()
        for conv in self.conversations:
            if conv.path is not None and conv.path.resolve() == path:
                self._show(conv)
                return
        conv = Conversation(path.stem, path)
        self.conversations.insert(0, conv)
        self._show(conv)

    def rename(self, cid: str, title: str) -> None:
        conv = self.by_id(cid)
        title = " ".join(title.split())
        if conv is None or not title:
            return
        if conv.path is not None and not conv.path.exists():  # named, not written yet
            conv.path = unique_path(conv.path.parent, title)
            title = conv.path.stem
        elif conv.path is not None:
            new_path = unique_path(conv.path.parent, title, keep=conv.path)
            try:
                conv.path.rename(new_path)
            except OSError as e:
                self.notice.show_message(f"Cannot rename {conv.path.name}: {e.strerror}", "error")
                return
            self.recent.remove(conv.path)
            self.recent.add(new_path)
            conv.path, title = new_path, new_path.stem
        conv.title = title
        self.sidebar.update_conversation(conv)
        self.current_changed.emit(self.current)

    def delete(self, cid: str) -> None:
        conv = self.by_id(cid)
        if conv is None or conv.id == self.generating:
            return
        if conv.path is not None:
            try:
                conv.path.unlink(missing_ok=True)
            except OSError as e:
                self.notice.show_message(f"Cannot delete {conv.path.name}: {e.strerror}", "error")
                return
            self.recent.remove(conv.path)
        self.conversations.remove(conv)
        if conv is self.current:
            self.current = None
            if self.conversations:
                self._show(self.conversations[0])
            else:
                self.new()
        else:
            self.sidebar.set_conversations(self.conversations, self.current and self.current.id)

    # -- chatting --------------------------------------------------------------------------
    def send(self, text: str) -> None:
        if self.generating or not self.can_chat():
            if not self.can_chat():
                self.notice.show_message("Choose a model and press Load before sending.", "error")
                self.composer.edit.setPlainText(text)
            return
        conv = self.current if self.current is not None and self.current.loaded else self.new()
        conv.add_user(text, self.settings["system_prompt"])
        self.sidebar.update_conversation(conv)
        self.current_changed.emit(conv)
        self._reply(conv)

    def regenerate(self, index: int) -> None:
        conv = self.current
        if conv is None or self.generating or not 0 <= index < len(conv.turns) or \
                conv.turns[index].role != "assistant":
            return
        conv.truncate(index)
        self._reply(conv)

    def edit(self, index: int, text: str) -> None:
        conv = self.current
        if conv is None or self.generating or not 0 <= index < len(conv.turns) or \
                conv.turns[index].role != "user":
            return
        conv.truncate(index)
        conv.add_user(text, self.settings["system_prompt"])
        self._reply(conv)

    def stop(self) -> None:
        self.client.cancel("chat")

    def _reply(self, conv: Conversation) -> None:
        messages = conv.engine_messages()
        self.cached = conv.id
        conv.begin_reply()
        self.view.sync()
        self._set_generating(conv.id)
        self.client.chat(conv.id, messages, self.settings.sampling_params())

    def _set_generating(self, cid: str | None) -> None:
        self.generating = cid
        self.composer.set_generating(cid is not None)
        self.view.set_busy(cid is not None)
        self.generating_changed.emit(cid is not None)

    def on_tokens(self, batch: TokenBatch) -> None:
        conv = self.by_id(batch.conversation_id)
        if conv is None:
            return
        conv.append_tokens(batch.tokens)
        if conv is self.current:
            self.view.refresh_last()

    def on_finished(self, reply: Reply) -> None:
        conv = self.by_id(reply.conversation_id)
        if conv is not None:
            conv.finish_reply(reply.done)
            if conv is self.current:
                self.view.refresh_last(now=True)
            self.sidebar.update_conversation(conv)
        self.status.show_stats(reply.done.stats, reply.n_past, reply.n_ctx)
        if reply.conversation_id == self.generating:
            self._set_generating(None)
        if reply.done.reason == "context_full":
            self.notice.show_message("The context is full: start a new conversation or choose a "
                                     "larger context size in the settings.", "error")
        if conv is not None and self.settings["autosave"]:
            self.save(conv)
        self.reply_finished.emit(reply)

    # -- files -----------------------------------------------------------------------------
    def save(self, conv: Conversation | None = None, path: Path | None = None) -> None:
        conv = conv or self.current
        if conv is None or conv.streaming is not None or not conv.turns:
            return
        if path is None and conv.path is None:  # the name is taken now, before the file exists
            conv.path = unique_path(paths.conversations_dir(), conv.title,
                                    taken=(c.path for c in self.conversations if c.path))
        path = path or conv.path
        values = self.settings.values
        meta = {"title": conv.title, "sampling": {k: values[k] for k in SAMPLING_KEYS}}
        self.client.save(conv.id, path, conv.engine_messages(), settings=meta,
                         with_kv=values["save_kv"])

    def on_saved(self, saved: Saved) -> None:
        conv = self.by_id(saved.conversation_id)
        if conv is not None:
            conv.path, conv.title, conv.dirty = saved.path, saved.path.stem, False
            self.sidebar.update_conversation(conv)
            if conv is self.current:
                self.current_changed.emit(conv)
        self.recent.add(saved.path)
        kv = "with its KV state" if saved.with_kv else "text only"
        self.status.showMessage(f"Saved {saved.path.name} ({kv})", 4000)
        self.conversation_saved.emit(saved)

    def on_model_loaded(self, _info: object) -> None:
        self.cached = None

    def on_opened(self, res: Opened) -> None:
        conv = self.by_id(res.conversation_id)
        if conv is None:
            return
        if res.restored_kv:
            self.cached = conv.id
        self.recent.add(res.path)
        shown = conv.loaded and conv.engine_messages() == res.messages
        if shown:  # a cache restore of a conversation already on screen: keep its turns
            if res.restored_kv:
                self.status.showMessage(f"Restored the KV state of {res.path.name}", 4000)
            self.conversation_opened.emit(res)
            return
        conv.set_messages(res.messages)
        if conv is self.current:
            self.view.set_placeholder_text("Send a message to start.")
            self.view.set_conversation(conv)
        if res.restored_kv:
            self.status.showMessage(f"Reopened {res.path.name} with its saved KV state", 6000)
        else:
            why = res.note or ("no model is loaded" if not self.can_chat()
                               else "the file holds no KV state")
            self.notice.show_message(f"Reopened {res.path.name} from its text ({why}); the next "
                                     "reply recomputes the prompt.", "info")
        if res.model_path is not None and not self.can_chat():
            self.model_suggested.emit(res.model_path)
        self.conversation_opened.emit(res)

    def on_failed(self, failure: Failure) -> None:
        conv = self.by_id(failure.conversation_id)
        if failure.op == "chat":
            if conv is not None:
                conv.abort_reply()
                if conv is self.current:
                    self.view.sync()
                    self.view.refresh_last(now=True)
            if failure.conversation_id == self.generating:
                self._set_generating(None)
            self.notice.show_message(f"The reply failed: {failure.message}", "error")
        elif failure.op == "save":
            self.notice.show_message(f"Could not save the conversation: {failure.message}", "error")
        elif failure.op == "open":
            if conv is not None and not conv.loaded:
                self.conversations.remove(conv)
                if conv.path is not None:
                    self.recent.remove(conv.path)
                if conv is self.current:
                    self.current = None
                    self.new()
                else:
                    self.sidebar.set_conversations(self.conversations,
                                                   self.current and self.current.id)
            self.notice.show_message(f"Could not open the conversation: {failure.message}", "error")
        else:
            return
        self.request_failed.emit(failure)
