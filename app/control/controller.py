"""The chat flow: send, stream, stop, regenerate, edit, switch versions, continue, tool calls.

Lives on the GUI thread. The state is the Qt-free model (``engine.conversation``): a
``Library`` of ``Conversation`` trees, which the views follow through its change callbacks.
This controller changes the model and sends frozen requests to the worker through the
``EngineClient``; what the worker emits comes back here (tokens, finished, failed). The files
(open, save, rename, delete) are ``self.files`` (app.control.files), the tool rounds ``self.tool_flow``
(app.control.tool_flow), the writes of a streaming reply ``self.checkpoints``
(app.control.checkpoints). Notices and figures about a conversation are kept in that conversation's
``status``, so they are shown with it and never on another one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.control.checkpoints import Checkpoints
from app.control.context_use import ContextUse
from app.control.conversation import RecentFiles
from app.control.conversation_settings import ConversationSettings
from app.control.files import ConversationFiles
from app.control.live_figures import LiveFigures
from app.control.reply_end import FailedReplies, finished_notice
from app.control.settings import Settings
from app.control.state import AppState, Notice
from app.control.tool_flow import ToolFlow, ToolSource
from app.control.typed_prompt import TypedPrompt
from app.engine_link.client import EngineClient
from app.engine_link.messages import ChatReply, Failure, LoadedModel, TokenBatch
from engine.chat.messages import Attachment, Image, Message
from engine.conversation.tree import Conversation


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
    message = Signal(str, int)  # a transient status line, its duration in ms
    draft_returned = Signal(str)  # text given back to the composer (it could not be sent)

    def __init__(self, client: EngineClient, settings: Settings, recent: RecentFiles,
                 state: AppState | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.client, self.settings, self.recent = client, settings, recent
        self.state = state or AppState()  # the window's, which it shares
        self.library = self.state.library
        self.live = LiveFigures()  # a streaming reply's figures
        self.files = ConversationFiles(client, settings, recent, self.library, new=self.new,
                                       notify=self._notify, state=self.state, parent=self)
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
        # its system prompt, sampling and thinking (a project's system prompt is set there)
        self.chat_settings = ConversationSettings(settings, self.state, self._notify, self.new)
        self.failed_replies = FailedReplies(settings, self.files, self._notify,
                                            self.draft_returned.emit)
        self.tool_flow = ToolFlow(lambda: self.tools_source(),
                                  lambda: self.settings["max_tool_rounds"], self)
        self.tool_flow.next_reply = self._more
        self.tool_flow.ended = self._round_ended
        self.tool_flow.asking = lambda conv, tools, call: self.client.read_ahead(
            conv.id, conv.engine_messages(), tools, call)
        self.typed = TypedPrompt(client, settings, self.state, self.chat_settings, self.tool_flow)
        self.library.subscribe(self._on_library)
        # while a reply streams its conversation is written every CHECKPOINT_S (text only)
        self.checkpoints = Checkpoints(client, settings, self.library, self.files, self)
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
        self.state.unsay(conv.id)
        return conv

    def select(self, cid: str) -> None:
        conv = self.by_id(cid)
        if conv is None or conv is self.current:
            return
        self.files.show(conv)

    # -- chatting --------------------------------------------------------------------------
    def send(self, text: str, attachments: tuple[Attachment, ...] = (),
             pictures: tuple[Image, ...] = ()) -> None:
        """Send ``text`` (with the files ``attachments``, read once, and ``pictures``) in the
        conversation shown."""
        if self.generating or not self.state.can_chat:
            if not self.state.can_chat:
                self.state.tell("Choose a model and press Load before sending.", "error")
                self.draft_returned.emit(text)
            return
        conv = self.current if self.current is not None and self.current.loaded else self.new()
        conv.add_user(text, self.chat_settings.system_prompt(conv),
                      self.chat_settings.files_for(conv, attachments), pictures)
        self.current_changed.emit(conv)
        self._reply(conv)

    def on_typed_ahead(self, figure: tuple[int, int] | None) -> None:
        self.state.read_ahead(figure)

    def typing(self, text: str, attachments: tuple[Attachment, ...] = (),
               pictures: tuple[Image, ...] = ()) -> None:
        """The person is writing ``text`` in the conversation shown: its prompt is read ahead
        (app.control.typed_prompt)."""
        self.typed.typing(text, attachments, pictures)

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
        self.state.unsay(conv.id)
        turn = conv.resume_reply()
        self._start(conv, messages, continue_text=turn.text)

    def stop(self) -> None:
        """Stop the reply being written, or the tool call waiting or running (Esc)."""
        self.client.cancel("chat")
        self.tool_flow.cancel()

    def answer_tool(self, answer: str) -> None:
        """The person's answer to the tool call waiting: "once", "always" or "deny"."""
        self.tool_flow.answer(answer)

    def _reply(self, conv: Conversation, regenerate: int | None = None) -> None:
        self.state.unsay(conv.id)
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
        self.live.start(conv.id)
        self._set_generating(conv.id)
        conv.model = self.state.model.target_path if self.state.model is not None else \
            self.state.loading
        self.client.chat(conv.id, messages, self.chat_settings.sampling_for(conv),
                         continue_text=continue_text, rescue=self.checkpoints.plan(conv),
                         speculate=self.chat_settings.drafts(conv),
                         tools=tools, read_calls=read_calls, thinking=self.chat_settings.thinking_for(conv))
        self.checkpoints.write()  # the message just sent is on disk before its reply's first token

    def checkpoint_all(self) -> None:
        """Before the process ends (a signal, the session's quit): the streaming reply's
        conversation as it is."""
        self.checkpoints.write()

    def _set_generating(self, cid: str | None) -> None:
        if cid is None:
            self.checkpoints.stop()
        self.library.generating = cid
        self.generating_changed.emit(cid is not None)

    def on_tokens(self, batch: TokenBatch) -> None:
        conv = self.by_id(batch.conversation_id)
        if conv is None:
            return
        self.live.tokens(conv, batch)

    def on_finished(self, reply: ChatReply) -> None:
        conv = self.by_id(reply.conversation_id)
        self.live.end(reply.conversation_id)
        if conv is not None:
            if conv.streaming is not None:
                conv.streaming.sources = reply.sources  # (shown as the reply ends)
            conv.finish_reply(reply.done, reply.calls)
            if reply.dropped:
                conv.status.dropped = reply.dropped
            notice = finished_notice(reply, functools.partial(self.continue_reply, conv), conv.id)
            conv.set_status(stats=reply.done.stats, live=False, n_past=reply.n_past,
                            n_ctx=reply.n_ctx)
            if notice is not None:
                self.state.say(notice)
            else:
                self.state.unsay(conv.id)
            if self.tool_flow.on_reply(conv, reply.calls, reply.done.reason):
                self.reply_finished.emit(reply)  # its calls are answered, then a reply follows
                return
        if reply.conversation_id == self.generating:
            self._set_generating(None)
        if conv is not None and self.settings["autosave"]:
            self.files.save(conv)
        self.reply_finished.emit(reply)

    def on_model_loaded(self, info: LoadedModel) -> None:
        self.files.model_loaded(info.target_path, info.switched)

    def on_failed(self, failure: Failure) -> None:
        conv = self.by_id(failure.conversation_id)
        if failure.op == "chat":
            self.live.end(failure.conversation_id)
            if conv is not None:
                self.tool_flow.drop(conv)
                conv.status.live = False
                self.failed_replies.failed(conv, failure)
            if failure.conversation_id == self.generating:
                self._set_generating(None)
        elif failure.op in ("save", "open"):
            self.files.on_failed(failure)
        else:
            return
        self.request_failed.emit(failure)

    def _notify(self, conv: Conversation | None, text: str, kind: str,
                action: str | None = None, callback: Callable[[], None] | None = None) -> None:
        self.state.say(Notice(text, "error" if kind == "error" else "info", action, callback,
                              scope=conv.id if conv is not None else None))

