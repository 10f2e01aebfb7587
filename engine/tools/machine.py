"""The rules of tool rounds, as one machine that the window (app.control.tool_flow: the person answers
each call with a button) and the command line (engine.runtime.tool_rounds: its flags answer) both drive.

It is pure: no threads, no model, no I/O. The driver starts it, tells it what happened (a reply
ended with these calls; a call was answered) and does what it says next: ``Ask`` a call of the
person, make the ``NextReply`` (the tools it shows, its tool choice, whether its calls are read),
or stop (``Over``). A round is up to ``max_rounds`` replies that may call tools; the one after
shows the tools but its calls are not read: it is the answer. Every reply shows the same tools,
so each prompt extends the last one and the cache keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.chat.messages import ToolCall
from engine.tools import MAX_ROUNDS, Tool, ToolChoice


@dataclass(frozen=True)
class NextReply:
    tools: tuple[Tool, ...]
    choice: ToolChoice
    read_calls: bool  # False: the round's last reply; its calls stay text


@dataclass(frozen=True)
class Ask:
    """Put ``call`` to the person (or the flags), run it if allowed, then ``answered()``."""

    call: ToolCall


@dataclass(frozen=True)
class Over:
    reason: str  # the last reply's end (stop, length, context_full...) or "cancelled"


Step = NextReply | Ask | Over


class ToolRounds:
    def __init__(self, tools: Sequence[Tool], *, choice: ToolChoice = ToolChoice(),
                 max_rounds: int = MAX_ROUNDS, cancelled: Callable[[], bool] = lambda: False) -> None:
        """``choice`` holds for the first reply (required: it is a call); later ones choose
        freely. ``cancelled``: the driver's stop (Esc, Ctrl-C), asked at each step."""
        self.tools = tuple(tools) if choice.mode != "none" else ()
        self.choice, self.max_rounds, self.cancelled = choice, max_rounds, cancelled
        self.replies = 0
        self.queue: list[ToolCall] = []  # the calls of the last reply not yet asked

    def start(self) -> NextReply:
        """The round's first reply."""
        return self._reply()

    def replied(self, calls: Sequence[ToolCall], reason: str) -> Step:
        """A reply ended (``reason``: its Done's) with ``calls``, the ones it was read for."""
        if self.cancelled() or reason == "cancelled":
            return Over("cancelled")
        if not calls or reason == "context_full":
            return Over(reason)
        self.queue = list(calls)
        return self._next()

    def answered(self) -> Step:
        """The call asked last has its result (run, refused or failed)."""
        return Over("cancelled") if self.cancelled() else self._next()

    def _next(self) -> Step:
        return Ask(self.queue.pop(0)) if self.queue else self._reply()

    def _reply(self) -> NextReply:
        self.replies += 1
        choice = self.choice if self.replies == 1 else ToolChoice("auto", parallel=self.choice.parallel)
        return NextReply(self.tools, choice, bool(self.tools) and self.replies <= self.max_rounds)
