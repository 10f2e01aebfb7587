"""The chat flow: send, stream, stop, regenerate, edit, switch versions, continue, tool calls.

Lives on the GUI thread. The state is the Qt-free model (``engine.conversation``): a
``Library`` of ``Conversation`` trees, which the views follow through its change callbacks.
This controller changes the model and sends frozen requests to the worker through the
``EngineClient``; what the worker emits comes back here (tokens, finished, failed). The files
(open, save, rename, delete) are ``self.files`` (app.control.files), the tool rounds ``self.tool_flow``
(app.control.tool_flow). Notices and figures about a conversation are kept in that conversation's
``status``, so they are shown with it and never on another one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from app.control.context_use import ContextUse
from app.control.conversation import RecentFiles, unique_path
from app.control.files import ConversationFiles
from app.control.models import gone_note
from app.control.settings import SAMPLING_KEYS, Settings, sampling_params
from app.control.state import AppState
from app.control.tool_flow import ToolFlow, ToolSource
from app.engine_link.client import EngineClient
from app.engine_link.messages import ChatReply, Failure, LoadedModel, RescuePlan, TokenBatch
from engine import paths
from engine.chat.messages import Attachment, Image, Message
from engine.conversation.presets import Preset
from engine.conversation.store import CUT, streaming_node, tree_to_json
from engine.conversation.tree import Conversation
from engine.decode.sampling import SamplingParams
from engine.errors import DuetError
from engine.events import Stats

log = logging.getLogger(__name__)

# A streaming reply is written this often: a crash or SIGKILL loses at most this much of it
# (never the message sent). A text-only write of a conversation takes a few ms.
CHECKPOINT_S = 2.0



class ChatController(QObject):
    current_changed = Signal(object)  # Conversation
    generating_changed = Signal(bool)
    model_suggested = Signal(object)  # Path of the model the conversation shown was made with
    reply_finished = Signal(object)  # ChatReply (after the view and the conversation were updated)
    conversation_saved = Signal(object)  # Saved
    conversation_opened = Signal(object)  # Opened
    file_renamed = Signal(object, object)  # the old and new Path of a saved conversation
    file_deleted = Signal(object)  # the Path of a deleted conversation
    request_failed = Signal(object)  # Failure of a chat, save or open (after it was shown)
    notice = Signal(str, str)  # text, kind: a notice about no conversation in particular
    message = Signal(str, int)  # a transient status line, its duration in ms
    draft_returned = Signal(str)  # text given back to the composer (it could not be sent)

    def __init__(self, client: EngineClient, settings: Settings, recent: RecentFiles,
                 state: AppState | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.client, self.settings, self.recent = client, settings, recent
        self.state = state or AppState()  # the window's, which it shares
        self.library = self.state.library
        self._live: dict[str, tuple[float, int, int]] = {}  # id → (first token at, tokens, drafted)
        self.files = ConversationFiles(client, settings, recent, self.library, show=self._show,
                                       new=self.new, notify=self._notify,
                                       state=self.state, parent=self)
        f = self.files
        for mine, theirs in ((self.current_changed, f.current_changed),
                             (self.model_suggested, f.model_suggested),
                             (self.conversation_saved, f.conversation_saved),
                             (self.conversation_opened, f.conversation_opened),
                             (self.message, f.message)):
            theirs.connect(mine)
        f.file_renamed.connect(self.file_renamed)
        f.file_deleted.connect(self.file_deleted)
        self.context_use = ContextUse(client, self.state, self)  # (after the files: it reads opened ones)
        # the MCP servers' tools (the window's Tools, once any server is set up)
        self.tools_source: Callable[[], ToolSource | None] = lambda: None
        # the system prompt of a conversation's project (app.control.projects), if it has one
        self.project_prompt: Callable[[Conversation], str | None] = lambda conv: None
        self.tool_flow = ToolFlow(lambda: self.tools_source(),
                                  lambda: self.settings["max_tool_rounds"], self)
        self.tool_flow.next_reply = self._more
        self.tool_flow.ended = self._round_ended
        self.tool_flow.asking = lambda conv, tools, call: self.client.read_ahead(
            conv.id, conv.engine_messages(), tools, call)
        self.library.subscribe(self._on_library)
        # while a reply streams its conversation is written every CHECKPOINT_S (text only)
        self._checkpoints = QTimer(self)
        self._checkpoints.setInterval(int(CHECKPOINT_S * 1000))
        self._checkpoints.timeout.connect(self.checkpoint)
        w = client.worker
        w.tokens.connect(self.on_tokens)
        w.finished.connect(self.on_finished)
        w.failed.connect(self.on_failed)
        w.loaded.connect(self.on_model_loaded)
        w.typed_ahead.connect(self.on_typed_ahead)  # a method: queued to this (the GUI's) thread

    # -- the model's state, by its old names -----------------------------------------------
    @property
    def conversations(self) -> list[Conversation]:
        return self.library.conversations

    @property
    def current(self) -> Conversation | None:
        return self.library.current

    @property
    def generating(self) -> str | None:
        return self.library.generating

    def by_id(self, cid: str | None) -> Conversation | None:
        return self.library.by_id(cid)

    def _on_library(self, kind: str, conv: Conversation | None) -> None:
        if kind == "current":
            self.current_changed.emit(conv)

    # -- the list --------------------------------------------------------------------------
    def start(self) -> None:
        """List the saved conversations and show a blank one (not listed until it is used)."""
        self.files.list_saved()
        self.new()

    def new(self) -> Conversation:
        conv = self.library.new()
        if conv.status.notice is not None:
            conv.set_status(notice=None)
        return conv

    def select(self, cid: str) -> None:
        conv = self.by_id(cid)
        if conv is None or conv is self.current:
            return
        self._show(conv)

    def _show(self, conv: Conversation) -> None:
        if conv.model is not None and self.generating is None:
            gone = gone_note(conv.model, self.state.model)
            if gone:
                self._notify(conv, gone, "info")
            else:  # its model comes back (first: the open below then restores its KV state there)
                self.model_suggested.emit(conv.model)
        if conv.path is None:  # new, never saved
            pass
        elif conv.loaded:
            if not conv.dirty and self.state.can_chat and self.generating is None:
                # its saved KV state, where the engine holds less of it (the engine's thread
                # decides): the next reply then need not recompute its history
                self.client.open(conv.id, conv.path, shown=True)
        else:
            self.client.open(conv.id, conv.path)
        self.library.show(conv)

    # -- chatting --------------------------------------------------------------------------
    def system_prompt(self, conv: Conversation) -> str:
        """The conversation's own (its preset's), else its project's, else the settings'."""
        if "system_prompt" in conv.settings:
            return conv.settings["system_prompt"]
        return self.project_prompt(conv) or self.settings["system_prompt"]

    def send(self, text: str, attachments: tuple[Attachment, ...] = (),
             pictures: tuple[Image, ...] = ()) -> None:
        """Send ``text`` (with the files ``attachments``, read once, and ``pictures``) in the
        conversation shown."""
        if self.generating or not self.state.can_chat:
            if not self.state.can_chat:
                self.notice.emit("Choose a model and press Load before sending.", "error")
                self.draft_returned.emit(text)
            return
        conv = self.current if self.current is not None and self.current.loaded else self.new()
        conv.add_user(text, self.system_prompt(conv), attachments, pictures)
        self.current_changed.emit(conv)
        self._reply(conv)

    def on_typed_ahead(self, figure: tuple[int, int] | None) -> None:
        self.state.read_ahead(figure)

    def typing(self, text: str, attachments: tuple[Attachment, ...] = (),
               pictures: tuple[Image, ...] = ()) -> None:
        """The person is writing ``text`` (with ``attachments``) in the conversation shown: the
        engine reads the prompt that sending it now would make, while nothing else runs
        (setting read_ahead); Enter then finds all of it read but its last token. More typing
        changes only the prompt's end: what it no longer shares (the last word, the template's
        closing tokens) is cut back and read anew. Nothing to read: it stops."""
        certain = text.strip()
        if not self.settings["read_ahead"] or self.generating or self.state.model is None or \
                not (certain or attachments or pictures):
            self.client.read_typing("", None)
            return
        conv = self.current if self.current is not None and self.current.loaded else None
        system = self.settings["system_prompt"] if conv is None else self.system_prompt(conv)
        messages = (conv or Conversation()).next_messages(certain, system, attachments, pictures)
        tools = self.tool_flow.tools_for(conv, first=True)[0] if conv is not None else ()
        self.client.read_typing(conv.id if conv is not None else "", messages,
                                self.sampling_for(conv) if conv is not None else
                                sampling_params(dict(self.settings.values)), tools,
                                self.thinking_for(conv))

    def regenerate(self, index: int) -> None:
        """A new version of reply ``index``; the old one stays one click away."""
        conv = self.current
        if conv is None or self.generating or not 0 <= index < len(conv.turns) or \
                conv.turns[index].role != "assistant":
            return
        self._reply(conv, index)

    def edit(self, index: int, text: str) -> None:
        """A new version of user message ``index``, answered; the old branch is kept."""
        conv = self.current
        if conv is None or self.generating or not 0 <= index < len(conv.turns) or \
                conv.turns[index].role != "user":
            return
        conv.edit(index, text)
        self._reply(conv)

    def switch(self, index: int, step: int) -> None:
        """Show another version of message ``index``; the engine keeps the shared prefix."""
        conv = self.current
        if conv is None or self.generating or not conv.switch(index, step):
            return
        # the status bar shows the figures of the reply shown: this version's, or the last
        # reply of the branch it leads to
        shown = conv.turns[index]
        reply = shown if shown.role == "assistant" and shown.stats is not None else next(
            (t for t in reversed(conv.turns) if t.stats is not None), None)
        conv.set_status(stats=reply.stats if reply is not None else None, live=False)
        self.context_use.measure(conv)  # the context this version's path takes

    def continue_reply(self, conv: Conversation | None = None) -> None:
        """Carry on a reply that stopped at the length limit, in the same message."""
        conv = conv or self.current
        if conv is None or self.generating or not self.state.can_chat or not conv.turns or \
                conv.turns[-1].role != "assistant" or conv.streaming is not None:
            return
        messages = conv.engine_messages(len(conv.turns) - 1)
        conv.set_status(notice=None)
        turn = conv.resume_reply()
        self._start(conv, messages, continue_text=turn.text)

    def stop(self) -> None:
        """Stop the reply being written, or the tool call waiting or running (Esc)."""
        self.client.cancel("chat")
        self.tool_flow.cancel()

    def answer_tool(self, answer: str) -> None:
        """The person's answer to the tool call waiting: "once", "always" or "deny"."""
        self.tool_flow.answer(answer)

    def apply_preset(self, preset: Preset, conv: Conversation | None = None) -> None:
        """Give ``conv`` (the one shown) ``preset``: its system prompt, sampling and drafter.
        With history, a changed system prompt becomes a new version of the first message and
        nothing after it can come from the cache: the chat says so. A drafter of "none" turns
        drafting off for this conversation's replies at once; another drafter is a model-load
        setting (the window says "at the next load")."""
        conv = conv or self.current
        if conv is None or conv.id == self.generating:
            return
        conv.preset = preset.name
        conv.settings = {**preset.chat_settings(), "drafter": preset.drafter}
        conv.dirty = conv.dirty or bool(conv.turns)
        conv.notify("meta")
        if conv.turns:
            after = conv.set_system(preset.system_prompt)
            if after:
                self._notify(conv, f"The system prompt changed: the {after} messages after it "
                             "will be processed again at the next reply (nothing after the "
                             "change is reused). The previous prompt is kept as version 1 "
                             "of the first message.", "info")
        if preset.drafter != "none" and self.settings["drafter"] != preset.drafter:
            self.settings.set("drafter", preset.drafter)  # the window says "at the next load"

    def thinking_for(self, conv: Conversation | None) -> bool | None:
        """Whether a reasoning model thinks before its replies in ``conv`` (its own switch, else
        the setting); None for a model that does not think (its replies are as they were)."""
        if self.state.model is None or not self.state.model.thinks:
            return None
        own = conv.settings.get("thinking") if conv is not None else None
        return bool(self.settings["thinking"] if own is None else own)

    def set_thinking(self, on: bool) -> None:
        """The Think switch: the conversation shown thinks before its next replies, or not
        (kept in its file; the next reply's prompt says so, nothing before it changes)."""
        conv = self.current if self.current is not None and self.current.loaded else self.new()
        if conv.settings.get("thinking", self.settings["thinking"]) == on:
            return
        conv.settings = {**conv.settings, "thinking": on}
        conv.dirty = conv.dirty or bool(conv.turns)
        conv.notify("meta")

    def sampling_for(self, conv: Conversation) -> SamplingParams:
        """The settings' sampling, with the conversation's own values (its preset) on top."""
        values = dict(self.settings.values)
        values.update({k: v for k, v in conv.settings.items() if k in SAMPLING_KEYS})
        return sampling_params(values)

    def _reply(self, conv: Conversation, regenerate: int | None = None) -> None:
        conv.set_status(notice=None)
        conv.begin_reply(regenerate)
        self._start(conv, conv.engine_messages())

    def _more(self, conv: Conversation) -> None:
        """The next reply of a tool round: every call of the last one has its result."""
        conv.begin_reply()
        self._start(conv, conv.engine_messages(), first=False)

    def _round_ended(self, conv: Conversation) -> None:
        """A tool round stopped without a reply to follow (cancelled while a call waited)."""
        if conv.id == self.generating:
            self._set_generating(None)
        if self.settings["autosave"]:
            self.files.save(conv)

    def _start(self, conv: Conversation, messages: tuple[Message, ...],
               continue_text: str | None = None, *, first: bool = True) -> None:
        tools, read_calls = self.tool_flow.tools_for(conv, first=first) \
            if continue_text is None else ((), False)
        self._live[conv.id] = (0.0, 0, 0)
        self._set_generating(conv.id)
        conv.model = self.state.model.target_path if self.state.model is not None else \
            self.state.loading
        self.client.chat(conv.id, messages, self.sampling_for(conv),
                         continue_text=continue_text, rescue=self._rescue_plan(conv),
                         speculate=conv.settings.get("drafter") != "none",
                         tools=tools, read_calls=read_calls, thinking=self.thinking_for(conv))
        self.checkpoint()  # the message just sent is on disk before its reply's first token

    def checkpoint(self) -> None:
        """Write the conversation whose reply streams, the reply so far marked as cut (text
        only, atomic, on this thread: it must hold even when the process ends next). With
        autosave off, nothing is written."""
        conv = self.by_id(self.generating)
        if conv is None or conv.streaming is None or not self.settings["autosave"]:
            self._checkpoints.stop()
            return
        plan = self._rescue_plan(conv)
        conv.path = plan.path  # the reply's own save writes the same file
        try:
            if not self.client.save_cut(plan, conv.engine_messages(), conv.streaming.text):
                return  # no model is loaded
        except (DuetError, OSError) as e:
            log.warning("could not checkpoint %s: %s", plan.path.name, e)
            return
        if not self._checkpoints.isActive():
            self._checkpoints.start()

    def checkpoint_all(self) -> None:
        """Before the process ends (a signal, the session's quit): the streaming reply's
        conversation as it is."""
        self.checkpoint()

    def _rescue_plan(self, conv: Conversation) -> RescuePlan:
        """How the worker saves ``conv`` if the process must end during this reply (a lost RPC
        worker): where, and the settings a save would write, with the streaming reply."""
        tree = tree_to_json(conv, streaming=True)
        path = conv.path or unique_path(paths.conversations_dir(), conv.title,
                                        taken=(c.path for c in self.conversations if c.path))
        return RescuePlan(path, self.files.file_settings(conv, tree), streaming_node(conv, tree))

    def _set_generating(self, cid: str | None) -> None:
        if cid is None:
            self._checkpoints.stop()
        self.library.generating = cid
        self.generating_changed.emit(cid is not None)

    def on_tokens(self, batch: TokenBatch) -> None:
        conv = self.by_id(batch.conversation_id)
        if conv is None:
            return
        first, n, drafted = self._live.get(conv.id, (0.0, 0, 0))
        now = time.monotonic()
        if n == 0:
            first = now
        n += len(batch.tokens)
        drafted += sum(t.from_draft for t in batch.tokens)
        self._live[conv.id] = (first, n, drafted)
        if n > 1 and now > first:  # the first batch's time is the start of the clock
            conv.status.stats = Stats(n_tokens=n - 1, gen_s=now - first, proposed=n,
                                      accepted=drafted)
            conv.status.live = True
        if batch.n_past:  # the context's fill, live (not the last reply's)
            conv.status.n_past, conv.status.n_ctx = batch.n_past, batch.n_ctx
        conv.append_tokens(batch.tokens)
        conv.notify("status")

    def on_finished(self, reply: ChatReply) -> None:
        conv = self.by_id(reply.conversation_id)
        self._live.pop(reply.conversation_id, None)
        if conv is not None:
            if conv.streaming is not None:
                conv.streaming.sources = reply.sources  # (shown as the reply ends)
            conv.finish_reply(reply.done, reply.calls)
            notice: tuple[str, str, str | None, Callable[[], None] | None] | None = None
            if reply.done.reason == "context_full":
                notice = ("The context is full: start a new conversation or choose a "
                          "larger context size in the settings.", "error", None, None)
            elif reply.done.reason == "length":
                notice = ("The reply stopped at the length limit.", "info", "Continue",
                          lambda c=conv: self.continue_reply(c))
            if reply.dropped:
                conv.status.dropped = reply.dropped
                if notice is None:
                    why = f" ({reply.shift_note})" if reply.shift_note else ""
                    notice = (f"The {reply.dropped} oldest messages are out of the model's view "
                              f"(the context is full); it still sees the system prompt{why}.",
                              "info", None, None)
            conv.set_status(stats=reply.done.stats, live=False, n_past=reply.n_past,
                            n_ctx=reply.n_ctx, notice=notice)
            if self.tool_flow.on_reply(conv, reply.calls, reply.done.reason):
                self.reply_finished.emit(reply)  # its calls are answered, then a reply follows
                return
        if reply.conversation_id == self.generating:
            self._set_generating(None)
        if conv is not None and self.settings["autosave"]:
            self.files.save(conv)
        self.reply_finished.emit(reply)

    def on_model_loaded(self, info: LoadedModel) -> None:
        for conv in self.conversations:
            conv.status.n_past = 0
        shown = self.current
        if not info.switched and shown is not None and shown.path is not None and shown.loaded \
                and not shown.dirty and self.generating is None and shown.model == info.target_path:
            # the model came back for the conversation shown: its saved KV state too
            self.client.open(shown.id, shown.path, shown=True)

    def on_failed(self, failure: Failure) -> None:
        conv = self.by_id(failure.conversation_id)
        if failure.op == "chat":
            self._live.pop(failure.conversation_id or "", None)
            if conv is not None:
                self.tool_flow.drop(conv)
                conv.status.live = False
                if failure.worker_lost:
                    self._worker_lost(conv, failure.message)
                else:
                    self._chat_failed(conv, failure)
            if failure.conversation_id == self.generating:
                self._set_generating(None)
        elif failure.op in ("save", "open"):
            self.files.on_failed(failure)
        else:
            return
        self.request_failed.emit(failure)

    def _worker_lost(self, conv: Conversation, message: str) -> None:
        """An RPC worker went away between passes: keep the reply so far (marked as cut), save
        the conversation (its text: the KV state was partly on the worker) and say so once."""
        turn = conv.streaming
        conv.abort_reply()
        if turn is not None and turn.text:
            turn.reason = CUT
            conv.dirty = True
        self._notify(conv, f"The reply was cut: {message}. The conversation is saved; the "
                     "next reply processes it again.", "error")
        if conv.turns:
            self.files.save(conv)

    def _chat_failed(self, conv: Conversation, failure: Failure) -> None:
        """A reply refused or failed: one line in the window. Refused before it produced
        anything, the message just sent goes back to the composer, editable (it is not left
        unanswered in the chat); a reply cut by a failure keeps its text, marked as failed."""
        streaming = conv.streaming
        empty = streaming is not None and not streaming.text
        conv.abort_reply()
        too_long = failure.too_long
        turns = conv.turns
        if empty and turns and turns[-1].role == "user":
            text = turns[-1].text
            conv.remove(len(turns) - 1)
            self.draft_returned.emit(text)
            self._unsend(conv)
        else:
            too_long = None  # a reply was kept: no offer about the message
        if too_long:  # the message cannot fit: say by how much, with an offer
            n, room = too_long
            size = f"{n:,} tokens, room for {room:,}" if n is not None else f"room for {room:,} tokens"
            self._notify(conv, f"The message is too long for the context ({size}). Shorten it, "
                         "or raise the context size for the next load.",
                         "error", "Raise the context", self._raise_context)
            return
        self._notify(conv, f"The reply failed: {failure.message}", "error")

    def _unsend(self, conv: Conversation) -> None:
        """The message went back to the composer: its checkpoint goes too (the file is
        written again as it now is, or removed if the message was all it held)."""
        if conv.path is None or not conv.path.exists() or not self.settings["autosave"]:
            return
        if conv.turns:
            self.files.save(conv)
        else:
            conv.path.unlink(missing_ok=True)
            conv.path = None

    def _raise_context(self) -> None:
        self.settings.set("n_ctx", min(2 * self.settings["n_ctx"], 131072))

    def _notify(self, conv: Conversation | None, text: str, kind: str,
                action: str | None = None, callback: Callable[[], None] | None = None) -> None:
        if conv is None:
            self.notice.emit(text, kind)
        else:
            conv.set_status(notice=(text, kind, action, callback))

