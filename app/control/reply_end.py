"""How a reply's end reads in the window: the notice a finished reply leaves (a full context,
the length limit with Continue, messages out of view), and what a failed one does: a message
refused before any reply goes back to the composer, a reply cut by a failure keeps its text,
a lost RPC worker's reply is kept and saved, each said in one line. No Qt of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from app.control.files import ConversationFiles
from app.control.settings import Settings
from app.control.state import Notice
from app.engine_link.messages import ChatReply, Failure
from engine.conversation.store import CUT
from engine.conversation.tree import Conversation


def finished_notice(reply: ChatReply, continue_reply: Callable[[], None],
                    scope: str) -> Notice | None:
    """The line a reply that ended leaves in its conversation (``scope``, its id; None:
    nothing to say)."""
    if reply.done.reason == "context_full":
        return Notice("The context is full: start a new conversation or choose a larger "
                      "context size in the settings.", "error", scope=scope)
    if reply.done.reason == "length":
        return Notice("The reply stopped at the length limit.", "info", "Continue",
                      continue_reply, scope=scope)
    if reply.dropped:
        why = f" ({reply.shift_note})" if reply.shift_note else ""
        return Notice(f"The {reply.dropped} oldest messages are out of the model's view (the "
                      f"context is full); it still sees the system prompt{why}.", scope=scope)
    return None


class FailedReplies:
    """``failed(conv, failure)``: what a reply that failed leaves; ``notify(conv, text, kind,
    action, callback)`` shows a line in ``conv``; ``give_back(text)`` returns a message to the
    composer."""

    def __init__(self, settings: Settings, files: ConversationFiles,
                 notify: Callable[..., None], give_back: Callable[[str], None]) -> None:
        self.settings, self.files, self.notify, self.give_back = settings, files, notify, give_back

    def failed(self, conv: Conversation, failure: Failure) -> None:
        if failure.worker_lost:
            self._worker_lost(conv, failure.message)
        else:
            self._chat_failed(conv, failure)

    def _worker_lost(self, conv: Conversation, message: str) -> None:
        """An RPC worker went away between passes: keep the reply so far (marked as cut), save
        the conversation (its text: the KV state was partly on the worker) and say so once."""
        turn = conv.streaming
        conv.abort_reply()
        if turn is not None and turn.text:
            turn.reason = CUT
            conv.dirty = True
        self.notify(conv, f"The reply was cut: {message}. The conversation is saved; the "
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
            self.give_back(text)
            self._unsend(conv)
        else:
            too_long = None  # a reply was kept: no offer about the message
        if too_long:  # the message cannot fit: say by how much, with an offer
            n, room = too_long
            size = f"{n:,} tokens, room for {room:,}" if n is not None else f"room for {room:,} tokens"
            self.notify(conv, f"The message is too long for the context ({size}). Shorten it, "
                        "or raise the context size for the next load.",
                        "error", "Raise the context", self._raise_context)
            return
        self.notify(conv, f"The reply failed: {failure.message}", "error")

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
