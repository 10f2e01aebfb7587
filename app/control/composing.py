"""The message being written: handed to the engine while the person types (read ahead), and sent.

While the person types, the prompt so far is handed to the engine at once, then at most once
more per TYPING_EVERY_MS (the text as it is at the interval's end): a throttle, not a wait for
a pause (someone typing 6 characters a second steadily never pauses 300 ms, and the words would
wait for the end). So each key typed at that pace is handed over as it comes, and the engine
starts reading the last word and the template's end at once (Enter often follows within a key's
time); faster typing, a held key, is handed over ten times a second. Each hand-over prepares the
prompt on the worker's thread (9-26 ms for a 1,000-token conversation of the 1.5B), those queued
behind a newer one skipped; a step under way is not stopped for it. Measured against every
250 ms: docs/benchmarks/read_ahead.md (first token 0.28 s, was 0.33).

Other changes to the prompt (a file attached, another conversation shown, a reply's end) are
handed over at the interval's end. A file still being read holds both the hand-over and the send.
QtCore only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QObject, QTimer

from engine.chat.messages import Attachment, Image

TYPING_EVERY_MS = 100
STILL_READING = "A file is still being read: send again in a moment."


class Files(Protocol):
    """The files attached to the message being written (app.views.attachments.Attachments)."""

    @property
    def pending(self) -> int: ...  # files still being read

    def current(self) -> tuple[Attachment, ...]: ...

    def take_all(self) -> tuple[Attachment, ...]: ...

    def current_pictures(self) -> tuple[Image, ...]: ...

    def take_pictures(self) -> tuple[Image, ...]: ...


class Chat(Protocol):
    """What the composer's message goes to (app.control.controller.ChatController)."""

    def typing(self, text: str, attachments: tuple[Attachment, ...] = (),
               pictures: tuple[Image, ...] = ()) -> None: ...

    def send(self, text: str, attachments: tuple[Attachment, ...] = (),
             pictures: tuple[Image, ...] = ()) -> None: ...


class Composing(QObject):
    """The composer's text (``text()``) and ``files`` to ``chat``: read ahead as typed
    (``keyed``, ``changed``), then sent (``send``). ``refused(text, line)``: a send that must
    wait, its text given back."""

    def __init__(self, chat: Chat, files: Files, text: Callable[[], str],
                 refused: Callable[[str, str], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.chat, self.files, self.text, self.refused = chat, files, text, refused
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(TYPING_EVERY_MS)
        self.timer.timeout.connect(self._interval_ended)
        self.due = False  # something changed since the last hand-over

    def keyed(self) -> None:
        """The text typed changed: handed over now, or at the end of the interval under way."""
        if self.timer.isActive():
            self.due = True
        else:
            self._hand_over()

    def changed(self, *_: object) -> None:
        """The prompt changed otherwise (a file, a conversation, a reply's end): handed over at
        the interval's end."""
        self.due = True
        if not self.timer.isActive():
            self.timer.start()

    def send(self, text: str) -> None:
        """Send ``text`` with the files attached; a file still being read: given back."""
        if self.files.pending:
            self.refused(text, STILL_READING)
            return
        self.chat.send(text, self.files.take_all(), self.files.take_pictures())

    def _interval_ended(self) -> None:
        if self.due:
            self._hand_over()

    def _hand_over(self) -> None:
        """The prompt as it is now, to the engine; the next change waits for the interval."""
        self.due = False
        if not self.files.pending:  # a file still being read: its end starts the timer
            self.chat.typing(self.text(), self.files.current(), self.files.current_pictures())
        self.timer.start()
