"""The conversations as files: open, save, rename and delete, and what comes back from the
worker's thread (``on_saved``, ``on_opened``, a failed save or open).

Lives on the GUI thread beside ``app.control.controller.ChatController`` (the chat flow, which owns it
and shares its ``Library``). Writing and reading, KV state included, run on the worker's
thread through the ``EngineClient``; the file tree of a conversation (its versions, figures and
tool turns) is ``engine.conversation.store``'s JSON in the file's settings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.control.conversation import RecentFiles, saved_conversations, unique_path
from app.control.models import gone_note
from app.control.settings import SAMPLING_KEYS, Settings, chat_settings
from app.control.state import AppState
from app.engine_link.client import EngineClient
from app.engine_link.messages import Failure, Opened, Saved
from engine import paths
from engine.conversation.library import Library
from engine.conversation.store import tree_from_json, tree_images, tree_to_json
from engine.conversation.tree import Conversation

log = logging.getLogger(__name__)

Notify = Callable[[Conversation | None, str, str], None]


class ConversationFiles(QObject):
    current_changed = Signal(object)  # Conversation: the one shown was renamed
    model_suggested = Signal(object)  # Path of the model a reopened conversation was made with
    conversation_saved = Signal(object)  # Saved
    conversation_opened = Signal(object)  # Opened
    file_renamed = Signal(object, object)  # the old and new Path of a saved conversation
    file_deleted = Signal(object)  # the Path of a deleted conversation
    message = Signal(str, int)  # a transient status line, its duration in ms

    def __init__(self, client: EngineClient, settings: Settings, recent: RecentFiles,
                 library: Library, *, new: Callable[[], Conversation], notify: Notify,
                 state: AppState, parent: QObject | None = None) -> None:
        """``new``: show a blank one; ``notify``: a notice with a conversation (or none);
        ``state``: the app's, which says whether a model is there to reopen the KV state into."""
        super().__init__(parent)
        self.client, self.settings, self.recent, self.library = client, settings, recent, library
        self.new, self.notify, self.state = new, notify, state
        self._pending_notice: dict[str, str] = {}  # id → notice to show once it is opened
        w = client.worker
        w.saved.connect(self.on_saved)
        w.opened.connect(self.on_opened)

    def show(self, conv: Conversation) -> None:
        """Make ``conv`` the one shown: read its file if it was not, or (when the model it was
        made with is loaded and nothing runs) its saved KV state, where the engine holds less
        of it, so that the next reply need not recompute its history. Its model is suggested
        when it is another one that is still there, and said to be gone otherwise."""
        generating = self.library.generating
        if conv.model is not None and generating is None:
            gone = gone_note(conv.model, self.state.model)
            if gone:
                self.notify(conv, gone, "info")
            else:  # its model comes back (first: the open below then restores its KV state there)
                self.model_suggested.emit(conv.model)
        if conv.path is None:  # new, never saved
            pass
        elif conv.loaded:
            if not conv.dirty and self.state.can_chat and generating is None:
                self.client.open(conv.id, conv.path, shown=True)  # (the engine's thread decides)
        else:
            self.client.open(conv.id, conv.path)
        self.library.show(conv)

    def model_loaded(self, target: Path, switched: bool) -> None:
        """A model was loaded: no conversation's KV state is in it; if it came back for the
        conversation shown (``switched``: False), that one's saved KV state comes back too."""
        for conv in self.library.conversations:
            conv.status.n_past = 0
        shown = self.library.current
        if not switched and shown is not None and shown.path is not None and shown.loaded \
                and not shown.dirty and self.library.generating is None and shown.model == target:
            self.client.open(shown.id, shown.path, shown=True)

    def list_saved(self) -> None:
        """Add the saved conversations to the library (read when first shown), most recent
        first, in one change of the list (10,000 imported ones included)."""
        self.library.add_saved([Conversation(p.stem, p) for p in saved_conversations()])

    def open_path(self, path: Path, notice: str | None = None) -> None:
        """Show the conversation at ``path``; ``notice``: shown with it instead of the usual
        one once it is read (a conversation saved when a lost worker ended the last run)."""
        path = Path(path).resolve()
        for conv in self.library.conversations:
            if conv.path is not None and conv.path.resolve() == path:
                if notice:
                    self.notify(conv, notice, "error")
                self.show(conv)
                return
        conv = Conversation(path.stem, path)
        if notice:
            self._pending_notice[conv.id] = notice
        self.library.add(conv, show=False)
        self.show(conv)

    def rename(self, cid: str, title: str) -> None:
        conv = self.library.by_id(cid)
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
                self.notify(conv, f"Cannot rename {conv.path.name}: {e.strerror}", "error")
                return
            self.recent.remove(conv.path)
            self.recent.add(new_path)
            self.file_renamed.emit(conv.path, new_path)
            conv.path, title = new_path, new_path.stem
        conv.rename(title)
        self.current_changed.emit(self.library.current)

    def delete(self, cid: str) -> None:
        conv = self.library.by_id(cid)
        if conv is None or conv.id == self.library.generating:
            return
        if conv.path is not None:
            try:
                conv.path.unlink(missing_ok=True)
            except OSError as e:
                self.notify(conv, f"Cannot delete {conv.path.name}: {e.strerror}", "error")
                return
            self.recent.remove(conv.path)
            self.file_deleted.emit(conv.path)
        shown = conv is self.library.current
        self.library.remove(conv)
        if shown:
            listed = self.library.listed()
            if listed:
                self.show(listed[0])
            else:
                self.new()

    def save(self, conv: Conversation | None = None, path: Path | None = None) -> None:
        conv = conv or self.library.current
        if conv is None or conv.streaming is not None or not conv.turns:
            return
        if path is None:
            if conv.path is None:  # the name is taken now, before the file exists
                conv.path = unique_path(paths.conversations_dir(), conv.title,
                                        taken=(c.path for c in self.library.conversations if c.path))
            path = conv.path
        self.client.save(conv.id, path, conv.engine_messages(),
                         settings=self.file_settings(conv, tree_to_json(conv)),
                         with_kv=self.settings["save_kv"], pictures=tree_images(conv))

    def on_saved(self, saved: Saved) -> None:
        conv = self.library.by_id(saved.conversation_id)
        if conv is not None:
            old = conv.path
            conv.path, conv.dirty = saved.path, False
            if old is not None and old != saved.path and old.exists() and \
                    not any(c.path == old for c in self.library.conversations):
                # Save as: the copy is the conversation shown; the file it came from stays
                # in the list as it was last saved
                self.library.add(Conversation(old.stem, old), first=False, show=False)
            conv.rename(saved.path.stem)
            if conv is self.library.current:
                self.current_changed.emit(conv)
        self.recent.add(saved.path)
        kv = "with its KV state" if saved.with_kv else "text only"
        self.message.emit(f"Saved {saved.path.name} ({kv})", 4000)
        self.conversation_saved.emit(saved)

    def on_opened(self, res: Opened) -> None:
        conv = self.library.by_id(res.conversation_id)
        if conv is None:
            return
        if res.restored_kv:
            conv.set_status(n_past=res.n_past, n_ctx=res.n_ctx)
        self.recent.add(res.path)
        shown = conv.loaded and conv.engine_messages() == res.messages
        if shown:  # a cache restore of a conversation already on screen: keep its turns
            if res.restored_kv:
                self.message.emit(f"Restored the KV state of {res.path.name}", 4000)
            self.conversation_opened.emit(res)
            return
        pictures = {i.sha256: i.data for m in res.messages for i in m.images}
        root = tree_from_json(res.settings.get("tree"), res.messages, pictures)
        if root is not None:
            conv.set_root(root)
        else:
            conv.set_messages(res.messages)
        if isinstance(res.settings.get("preset"), str):
            conv.preset = res.settings["preset"]
        unusable = ""
        if isinstance(res.settings.get("chat"), dict):
            conv.settings, refused = chat_settings(res.settings["chat"])
            if refused:  # the conversation opens with the defaults for these, and says so
                unusable = (f" Some of its settings were not usable ({'; '.join(refused)[:300]}): "
                            "the defaults are used for those.")
        last = next((t for t in reversed(conv.turns) if t.stats is not None), None)
        conv.set_status(stats=last.stats if last else None)
        pending = self._pending_notice.pop(conv.id, None)
        if pending:
            self.notify(conv, pending + unusable, "error")
        elif res.restored_kv and not unusable:
            self.message.emit(f"Reopened {res.path.name} with its saved KV state", 6000)
        elif res.restored_kv:
            self.notify(conv, f"Reopened {res.path.name} with its saved KV state.{unusable}", "info")
        else:
            why = res.note or ("no model is loaded" if not self.state.can_chat
                               else "the file holds no KV state")
            self.notify(conv, f"Reopened {res.path.name} from its text ({why}); the next "
                         f"reply recomputes the prompt.{unusable}", "info")
        if res.model_path is not None:
            conv.model = res.model_path
            gone = gone_note(res.model_path, self.state.model)
            if gone:
                self.notify(conv, gone, "info")
            elif conv is self.library.current:
                self.model_suggested.emit(res.model_path)  # (nothing when it is the one in use)
        self.conversation_opened.emit(res)

    def file_settings(self, conv: Conversation, tree: dict) -> dict:
        """The settings a save writes for ``conv`` with ``tree`` (its conversation tree)."""
        values = self.settings.values
        meta = {"title": conv.title, "sampling": {k: values[k] for k in SAMPLING_KEYS},
                "tree": tree}
        if conv.preset:
            meta["preset"] = conv.preset
        if conv.settings:
            meta["chat"] = dict(conv.settings)
        return meta

    def on_failed(self, failure: Failure) -> None:
        """A save or open failed: one line; a conversation whose file could not be read goes."""
        conv = self.library.by_id(failure.conversation_id)
        if failure.op == "save":
            self.notify(conv, f"Could not save the conversation: {failure.message}", "error")
        elif failure.op == "open":
            if conv is not None and not conv.loaded:
                shown = conv is self.library.current
                self.library.remove(conv)
                if conv.path is not None:
                    self.recent.remove(conv.path)
                if shown:
                    self.new()
            self.notify(self.library.current, f"Could not open the conversation: {failure.message}",
                        "error")
