"""One answer for a tool call: a call that is cancelled, names no tool or crashes gives the model
the same words in the window (app.control.tool_flow) as on the command line
(engine.runtime.tool_rounds). Both drivers run here on the same calls; a real model renders the
prompt the command line reads ahead."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from app.control.tool_flow import ToolFlow
from engine.chat.messages import Message, ToolCall
from engine.conversation.tree import Conversation
from engine.mcp.config import McpConfig
from engine.mcp.offer import call_tool, tools_of
from engine.mcp.toolbox import Toolbox, ToolInfo, build_toolbox
from engine.runtime.tool_rounds import ToolOffer, _answer
from engine.tools.calls import ToolResult
from tests.conftest import REPLY_WAIT_S

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


@dataclass
class Host:
    """A tool host whose one tool hangs until cancelled, or raises."""

    box: Toolbox
    behaviour: str
    entered: threading.Event = field(default_factory=threading.Event)

    def toolbox(self) -> Toolbox:
        return self.box

    def call(self, server: str, tool: str, arguments: dict, *, cancel: threading.Event) -> ToolResult:
        self.entered.set()
        if self.behaviour == "crash":
            raise RuntimeError("a bug in the runner")
        cancel.wait()
        return ToolResult.error(f"{server}/{tool}: cancelled")  # what the MCP host says


@dataclass
class Source:
    host: Host
    config: McpConfig = field(default_factory=McpConfig)

    def set_config(self, config: McpConfig) -> str:
        return ""


@dataclass
class Reader:
    """The command line's generator, as far as a tool call needs it: it reads the next prompt
    ahead while the call runs, and cancels the call once it is reading (Ctrl-C)."""

    model: object
    host: Host
    cancel_on_read: threading.Event | None = None

    def read_ahead(self, tokens, cancel=None) -> int:
        if self.cancel_on_read is not None:
            self.host.entered.wait(REPLY_WAIT_S)
            self.cancel_on_read.set()
        return len(tokens)


def call_of(name: str) -> ToolCall:
    return ToolCall(name=name, arguments='{"city": "Oslo"}', id="call_1")


def command_line(model, behaviour: str, name: str) -> str:
    host = Host(build_toolbox([("weather", [ToolInfo("forecast", "", SCHEMA)])]), behaviour)
    cancel = threading.Event()
    hangs = behaviour == "hang" and name == "forecast"  # an unknown name never reaches the host
    gen = Reader(model, host, cancel if hangs else None)
    offer = ToolOffer(tools_of(host.box), lambda call, c: call_tool(host, host.box, call, c))  # type: ignore[arg-type]
    history = [Message("user", "Weather in Oslo?"), Message("assistant", "", tool_calls=(call_of(name),))]
    allowed, result = _answer(gen, history, call_of(name), offer, lambda call: True, cancel)  # type: ignore[arg-type]
    assert allowed
    return result.text


def window(qtbot, behaviour: str, name: str) -> str:
    host = Host(build_toolbox([("weather", [ToolInfo("forecast", "", SCHEMA)])]), behaviour)
    config = McpConfig()
    flow = ToolFlow(lambda: Source(host, config), lambda: 4)  # type: ignore[arg-type,return-value]
    conv = Conversation()
    conv.add_user("Weather in Oslo?")
    flow.tools_for(conv, first=True)
    assert flow.on_reply(conv, (call_of(name),), "stop")
    turn = conv.turns[-1]
    if turn.streaming:  # a real tool: it waits for the person
        flow.answer("once")
        if behaviour == "hang":
            assert host.entered.wait(REPLY_WAIT_S)
            flow.cancel()
        qtbot.waitUntil(lambda: not turn.streaming, timeout=REPLY_WAIT_S * 1000)
    return turn.text


@pytest.mark.logs_errors  # a runner that raises is logged as the bug it is
@pytest.mark.parametrize(("behaviour", "name"), [("hang", "forecast"), ("crash", "forecast"),
                                                 ("hang", "no_such_tool")])
def test_a_call_gets_the_same_words_in_the_window_and_on_the_command_line(qtbot, smol, behaviour, name):
    said_there = command_line(smol, behaviour, name)
    said_here = window(qtbot, behaviour, name)
    assert said_here == said_there
    expected = {"no_such_tool": "There is no tool named 'no_such_tool'.",
                "hang": "The call was cancelled.", "crash": "forecast: the call failed (RuntimeError)."}
    assert said_here == expected["no_such_tool" if name == "no_such_tool" else behaviour]
