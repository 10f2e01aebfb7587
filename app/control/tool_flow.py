"""Tool rounds in the window: the model calls a tool, the person answers, the model goes on.

A reply to the person starts a *round*: the enabled tools of the MCP servers are taken once
(``Tools.host.toolbox()``, a snapshot) and shown to the model in every reply of the round, so
each prompt extends the last one and the cache keeps it. When a reply makes calls, each becomes
a tool turn in the conversation, one at a time: it waits for the person (*Allow once*, *Always
allow*, *Deny*) unless its tool is always allowed, runs on its server in a thread of its own
(the GUI never waits), and its result (or a one-line error) is the turn's text. When every call
is answered the next reply starts, until a reply makes no call or the rounds allowed by the
setting ``max_tool_rounds`` are used (the last reply's calls stay text: it is the answer).

How many replies a round has, which call is asked next and when the round ends are the rules
of engine.tools.machine, the ones the command line drives too; this module adds the person's
consent, the calls' threads and Qt.

Nothing a server sends can answer a call or change a setting: only ``answer`` does, and only
the window's buttons call it. Stop (Esc) cancels the round: a call waiting or running ends as
cancelled, and no reply follows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from PySide6.QtCore import QObject, Signal

from engine.chat.messages import ToolCall
from engine.conversation.tree import Conversation, Turn
from engine.mcp.config import McpConfig
from engine.mcp.host import ToolHost
from engine.mcp.offer import call_tool, tools_of
from engine.mcp.toolbox import Toolbox
from engine.tools import Tool
from engine.tools.calls import CANCELLED, REFUSED, ToolResult, run_call, unknown
from engine.tools.machine import NextReply, Over, Step, ToolRounds

log = logging.getLogger(__name__)

ANSWERS = ("once", "always", "deny")


class ToolSource(Protocol):
    """What the window's ``app.views.tools_panel.Tools`` offers here."""

    host: ToolHost
    config: McpConfig

    def set_config(self, config: McpConfig) -> str: ...


@dataclass
class _Round:
    conv: Conversation
    box: Toolbox
    rules: ToolRounds  # engine.tools.machine: what comes next
    reply: NextReply  # the reply being made, or the next one
    turn: Turn | None = None  # the call waiting or running
    call: ToolCall | None = None
    running: object | None = None  # the token of the call running (a stale result is dropped)
    cancel: threading.Event = field(default_factory=threading.Event)


class ToolFlow(QObject):
    """The tool rounds of the window's conversations (one at a time: the one generating).

    ``next_reply(conv)`` is called when every call of a reply is answered (the controller starts
    the next reply); ``ended(conv)`` when a round ends without one (cancelled); ``asking(conv, tools, call)``
    before each call is put to the person (the controller reads the next prompt ahead)."""

    result_ready = Signal(object, object)  # (token, ToolResult), from a call's thread

    def __init__(self, source: Callable[[], ToolSource | None], max_rounds: Callable[[], int],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.source, self.max_rounds = source, max_rounds
        self.round: _Round | None = None
        self.next_reply: Callable[[Conversation], None] = lambda conv: None
        self.ended: Callable[[Conversation], None] = lambda conv: None
        # (conv, tools, call): a call is put to the person; the part of the next prompt before
        # its result can be read meanwhile
        self.asking: Callable[[Conversation, tuple[Tool, ...], ToolCall], None] = \
            lambda conv, tools, call: None
        self.result_ready.connect(self._on_result)

    # -- the controller's side ---------------------------------------------------------------
    def tools_for(self, conv: Conversation, *, first: bool) -> tuple[tuple[Tool, ...], bool]:
        """(the tools the next reply of ``conv`` is shown, whether its calls are read).
        ``first``: the reply answers the person (a new round); else it goes on after results."""
        r = self.round
        if first or r is None or r.conv is not conv:
            src = self.source()
            box = src.host.toolbox() if src is not None else Toolbox()
            cancel = threading.Event()
            rules = ToolRounds(tools_of(box), max_rounds=self.max_rounds(), cancelled=cancel.is_set)
            self.round = r = _Round(conv, box, rules, rules.start(), cancel=cancel)
        return r.reply.tools, r.reply.read_calls

    def on_reply(self, conv: Conversation, calls: tuple[ToolCall, ...], reason: str) -> bool:
        """A reply of ``conv`` finished with ``calls``: True when they are being answered (the
        round goes on), False when the round is over."""
        r = self.round
        if r is None or r.conv is not conv:
            return False
        step = r.rules.replied(calls, reason)
        if isinstance(step, Over):
            self.round = None
            return False
        self._do(step)
        return True

    def answer(self, answer: str) -> None:
        """The person's answer to the call waiting: "once", "always" or "deny"."""
        r = self.round
        if r is None or r.turn is None or r.call is None or not r.turn.ask or answer not in ANSWERS:
            return
        if answer == "deny":
            r.conv.finish_tool(r.turn, REFUSED, "denied")
            self._do(r.rules.answered())
            return
        if answer == "always":
            self._always_allow(r.call)
        self._run()

    def cancel(self) -> bool:
        """Stop the round (Esc, Stop): a call waiting ends now, a running one when its server
        lets go (its result is dropped). False when no round is under way."""
        r = self.round
        if r is None:
            return False
        r.cancel.set()
        if r.turn is not None and r.turn.ask:
            r.conv.finish_tool(r.turn, CANCELLED, "cancelled")
            self._end()
        return True

    def drop(self, conv: Conversation) -> None:
        """Forget the round of ``conv`` (its reply failed)."""
        if self.round is not None and self.round.conv is conv:
            self.round.cancel.set()
            self.round = None

    @property
    def waiting(self) -> bool:
        """A call waits for the person or runs."""
        return self.round is not None and self.round.turn is not None

    # -- internals -----------------------------------------------------------------------------
    def _do(self, step: Step) -> None:
        r = self.round
        assert r is not None
        r.turn = r.call = None
        if isinstance(step, Over):  # stopped while the calls were answered
            self._end()
        elif isinstance(step, NextReply):
            r.reply = step
            self.next_reply(r.conv)
        else:
            self._ask(step.call)

    def _ask(self, call: ToolCall) -> None:
        r = self.round
        assert r is not None
        r.call = call
        self.asking(r.conv, r.reply.tools, call)  # (before the turn: its messages end with the reply)
        r.turn = turn = r.conv.add_tool(call)
        where = r.box.resolve(call.name)
        if where is None:
            r.conv.finish_tool(turn, unknown(call.name).text, "error")
            self._do(r.rules.answered())
        elif where[1] in self._allowed(where[0]):
            self._run()

    def _run(self) -> None:
        r = self.round
        assert r is not None and r.turn is not None and r.call is not None
        r.conv.run_tool(r.turn)
        token = r.running = object()
        call, box, cancel = r.call, r.box, r.cancel
        src = self.source()
        host = src.host if src is not None else None

        def run(call: ToolCall, cancel: threading.Event) -> ToolResult:
            return call_tool(host, box, call, cancel) if host is not None else \
                ToolResult.error("the tools are closed")

        def work() -> None:
            self.result_ready.emit(token, run_call(run, call, cancel))

        threading.Thread(target=work, name=f"tool-call-{call.name}", daemon=True).start()

    def _on_result(self, token: object, result: ToolResult) -> None:
        r = self.round
        if r is None or r.running is not token or r.turn is None:
            return
        r.running = None
        if r.cancel.is_set():
            r.conv.finish_tool(r.turn, CANCELLED, "cancelled")
        else:
            r.conv.finish_tool(r.turn, result.text, "error" if result.is_error else None)
        self._do(r.rules.answered())  # Over when cancelled

    def _end(self) -> None:
        r = self.round
        self.round = None
        if r is not None:
            self.ended(r.conv)

    def _allowed(self, server: str) -> frozenset[str]:
        src = self.source()
        config = src.config.get(server) if src is not None else None
        return config.allowed_tools if config is not None else frozenset()

    def _always_allow(self, call: ToolCall) -> None:
        r, src = self.round, self.source()
        where = r.box.resolve(call.name) if r is not None else None
        server = src.config.get(where[0]) if src is not None and where is not None else None
        if src is None or where is None or server is None:
            return
        changed = replace(server, allowed_tools=server.allowed_tools | {where[1]})
        error = src.set_config(src.config.put(changed, replacing=server.name))
        if error:
            log.warning("%s", error)

