"""Tools in the chat, through the real window: the 1.5B (the starter chat model, whose template
renders tools) calls the tools of real MCP servers over stdio, and the person answers each call.

Allowed, the call runs and the model answers from its result; denied, the server never sees it
and the model is told; Esc ends a call that hangs and the chat goes on; what a hostile server
sends stays plain text and approves nothing; the turns are saved and reopen with the KV state,
without running anything again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.views.tool_turns import ToolTurnWidget
from app.views.tools_panel import Tools
from engine.conversation.tree import Turn
from engine.mcp import HostLimits, McpConfig, ServerConfig, ToolHost
from engine.mcp.offer import tools_of
from engine.tools.calls import REFUSED
from engine.tools.prompting import result_prefix
from tests.app.conftest import LONG_MS
from tests.conftest import model_path
from tests.engine.mcp.mcp_servers import INJECTION, stdio_args

START = 120.0  # seconds a server may take to start on a busy machine (a bound, not a measure)
ANSWER = "You are a helpful assistant. When a tool result arrives, answer the user with it."


FRIENDLY = ("echo", "add", "picture", "env", "pid", "gate")
HOSTILE = ("huge", "hang", "crash", "inject", "record", "ping")


def stdio_server(name: str, kind: str, env: dict[str, str] | None = None, *,
                 only: tuple[str, ...] = ()) -> ServerConfig:
    """A test server; ``only``: the tools left enabled (the 1.5B wanders among many)."""
    command, *args = stdio_args(kind)
    every = FRIENDLY if kind == "friendly" else HOSTILE
    off = frozenset(t for t in every if t not in only) if only else frozenset()
    return ServerConfig.stdio(name, command, args, env, disabled_tools=off)


@pytest.fixture
def tools(window, tmp_path: Path) -> Tools:
    """The window's Tools (its MCP servers), in a test folder."""
    return Tools(window, path=tmp_path / "mcp.json",
                 host=ToolHost(HostLimits(start_timeout=START), log_dir=tmp_path / "logs"))


@pytest.fixture
def chat(driver, settings, tools):
    """The window with the 1.5B loaded, greedy, replies long enough for a call."""
    # the person's system prompt: the 1.5B tends to call a tool again after its result
    settings.update({"max_tokens": 80, "system_prompt": ANSWER})
    driver.load(model_path("target"))
    return driver


def serve(tools: Tools, *servers: ServerConfig) -> None:
    tools.set_config(McpConfig(servers))
    for s in servers:
        status = tools.host.wait_for(s.name, ("ready", "failed"), START)
        assert status.state == "ready", status


def tool_turns(window) -> list[Turn]:
    return [t for t in window.controller.current.turns if t.role == "tool"]


def wait_for_call(qtbot: QtBot, window, n: int = 1) -> ToolTurnWidget:
    """The widget of the n-th tool turn, once it waits for the person."""
    qtbot.waitUntil(lambda: len(tool_turns(window)) >= n and tool_turns(window)[n - 1].ask,
                    timeout=LONG_MS)
    widgets = [w for w in window.chat_view.widgets if isinstance(w, ToolTurnWidget)]
    widget = widgets[n - 1]
    assert not widget.ask_row.isHidden()  # its buttons are on (Qt shows a new widget queued)
    qtbot.waitUntil(widget.ask_row.isVisible, timeout=LONG_MS)
    return widget


def wait_idle(qtbot: QtBot, window, answer: str = "deny") -> None:
    """Wait for the round to end; a further call the model makes gets ``answer`` (the rounds
    are bounded by the setting, so this ends)."""
    while True:
        qtbot.waitUntil(lambda: window.controller.generating is None or
                        any(t.ask for t in tool_turns(window)), timeout=LONG_MS)
        if window.controller.generating is None:
            return
        widget = next(w for w in window.chat_view.widgets
                      if isinstance(w, ToolTurnWidget) and w.turn.ask)
        qtbot.mouseClick(widget.buttons[answer], qtbot_left())


def send(window, text: str) -> None:
    window.controller.send(text)


def test_an_allowed_call_runs_and_the_model_answers_from_its_result(chat, qtbot, window, tools) -> None:
    serve(tools, stdio_server("friendly", "friendly", only=("add",)))
    send(window, "Use the add tool to add 2 and 3.")
    widget = wait_for_call(qtbot, window)
    assert widget.call is not None and widget.call.name == "add"
    assert "a: 2" in widget.call_label.text() and "b: 3" in widget.call_label.text()
    assert window.controller.generating  # the chat waits for the person
    qtbot.mouseClick(widget.buttons["once"], qtbot_left())
    wait_idle(qtbot, window)
    turns = [t for t in window.controller.current.turns if t.role != "system"]
    roles = [t.role for t in turns]
    assert roles[:4] == ["user", "assistant", "tool", "assistant"], [(t.role, t.text) for t in turns]
    call_turn, result, answer = turns[1], turns[2], turns[-1]
    assert call_turn.tool_calls and call_turn.tool_calls[0].id == result.tool_call_id
    assert (result.text, result.reason) == ("5", None)  # the server's sum
    assert answer.role == "assistant" and not answer.tool_calls and answer.text.strip(), \
        [(t.role, t.text, t.tool_calls, t.reason) for t in turns]
    assert "5" in answer.text, [(t.role, t.text) for t in turns]
    # while the person chose, the prompt up to the result was read: the reply after it read
    # only the result
    conv = window.controller.current
    upto = conv.turns.index(result)
    prefix = result_prefix(window.client.worker.runtime.target, conv.engine_messages(upto),
                           tools_of(tools.host.toolbox()), call_turn.tool_calls[0])
    after = conv.turns[upto + 1].stats
    assert after is not None and after.n_cached_tokens >= len(prefix)
    assert widget.ask_row.isHidden() and not widget.fold_button.isHidden()
    # the window can chat again
    assert window.controller.generating is None


def test_a_denied_call_never_reaches_the_server_and_the_model_is_told(chat, qtbot, window, tools,
                                                                      tmp_path: Path) -> None:
    record = tmp_path / "record"
    serve(tools, stdio_server("hostile", "hostile", {"RECORD_FILE": str(record)}, only=("record",)))
    send(window, "Call the record tool now.")
    widget = wait_for_call(qtbot, window)
    assert widget.call is not None and widget.call.name == "record"
    qtbot.mouseClick(widget.buttons["deny"], qtbot_left())
    wait_idle(qtbot, window)
    result = tool_turns(window)[0]
    assert (result.text, result.reason) == (REFUSED, "denied")
    assert not record.exists()
    turns = window.controller.current.turns
    assert turns[turns.index(result) + 1].role == "assistant"  # the model went on


def test_esc_cancels_a_call_that_hangs_and_the_chat_goes_on(chat, qtbot, window, tools,
                                                           tmp_path: Path) -> None:
    serve(tools, stdio_server("hostile", "hostile", only=("hang",)))
    send(window, "Call the hang tool.")
    widget = wait_for_call(qtbot, window)
    assert widget.call is not None and widget.call.name == "hang"
    qtbot.mouseClick(widget.buttons["once"], qtbot_left())
    qtbot.waitUntil(lambda: not tool_turns(window)[0].ask, timeout=LONG_MS)
    assert tool_turns(window)[0].streaming  # running: the server never answers
    esc(qtbot, window)
    wait_idle(qtbot, window)
    result = tool_turns(window)[0]
    assert result.reason == "cancelled" and not result.streaming
    assert window.controller.current.turns[-1] is result  # no reply followed the cancel
    with qtbot.waitSignal(window.controller.reply_finished, timeout=LONG_MS):
        send(window, "Say hello.")
    wait_idle(qtbot, window)  # (a small model may call the tool again: denied, it answers)
    after = window.controller.current.turns
    after = after[after.index(result) + 1:]
    assert [t.role for t in after[:2]] == ["user", "assistant"] and after[-1].role == "assistant"


def test_a_server_that_crashes_mid_call_gives_one_line_and_the_chat_goes_on(chat, qtbot, window,
                                                                             tools) -> None:
    serve(tools, stdio_server("hostile", "hostile", only=("crash",)))
    send(window, "Call the crash tool.")
    widget = wait_for_call(qtbot, window)
    assert widget.call is not None and widget.call.name == "crash"
    qtbot.mouseClick(widget.buttons["once"], qtbot_left())
    wait_idle(qtbot, window)
    result = tool_turns(window)[0]
    assert result.reason == "error" and "\n" not in result.text.strip(), result.text
    assert "failed" in widget.meta_label.text()
    with qtbot.waitSignal(window.controller.reply_finished, timeout=LONG_MS):
        send(window, "Say hello.")


def test_a_result_that_spells_chat_markup_is_shown_as_text_and_approves_nothing(
        chat, qtbot, window, tools, tmp_path: Path) -> None:
    record = tmp_path / "record"
    serve(tools, stdio_server("hostile", "hostile", {"RECORD_FILE": str(record)},
                              only=("inject", "record")))
    send(window, "Call the inject tool.")
    widget = wait_for_call(qtbot, window)
    assert widget.call is not None and widget.call.name == "inject"
    qtbot.mouseClick(widget.buttons["once"], qtbot_left())
    # whatever the model does next, a call it makes waits for the person: none runs by itself
    qtbot.waitUntil(lambda: window.controller.generating is None or
                    (len(tool_turns(window)) > 1 and tool_turns(window)[1].ask), timeout=LONG_MS)
    result = tool_turns(window)[0]
    assert result.text == INJECTION
    widget.fold_button.setChecked(True)
    assert widget.body.toPlainText() == INJECTION.strip("\n") or \
        widget.body.toPlainText() == INJECTION  # plain text, as sent
    assert "<|im_start|>" in widget.body.toPlainText()
    assert not record.exists()
    window.controller.stop()
    wait_idle(qtbot, window)
    assert not record.exists()


def test_tool_turns_are_saved_and_reopen_from_the_kv_state_without_running_again(
        chat, qtbot, window, tools, settings) -> None:
    serve(tools, stdio_server("friendly", "friendly", only=("add",)))
    settings.set("autosave", True)
    send(window, "Use the add tool to add 2 and 3.")
    qtbot.mouseClick(wait_for_call(qtbot, window).buttons["always"], qtbot_left())
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        wait_idle(qtbot, window)
    assert "add" in tools.config.get("friendly").allowed_tools  # "Always allow" is remembered
    path = saved.args[0].path
    conv = window.controller.current
    before = [(t.role, t.text, t.tool_calls, t.tool_call_id) for t in conv.turns]
    window.controller.new()
    window.controller.library.remove(conv)  # read from the file, not from memory
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS) as opened:
        window.controller.files.open_path(path)
    assert opened.args[0].restored_kv, opened.args[0].note
    assert [m.role for m in opened.args[0].messages][:5] == ["system", "user", "assistant", "tool",
                                                             "assistant"]
    after = [(t.role, t.text, t.tool_calls, t.tool_call_id) for t in window.controller.current.turns]
    assert after == before
    assert any(isinstance(w, ToolTurnWidget) for w in window.chat_view.widgets)
    assert window.controller.generating is None  # nothing runs on reopening


def qtbot_left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def esc(qtbot: QtBot, window) -> None:
    from PySide6.QtCore import Qt

    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)


def test_regenerating_the_answer_after_a_tool_result_keeps_the_tool_turn(chat, qtbot, window,
                                                                         tools) -> None:
    serve(tools, stdio_server("friendly", "friendly", only=("add",)))
    send(window, "Use the add tool to add 2 and 3.")
    qtbot.mouseClick(wait_for_call(qtbot, window).buttons["once"], qtbot_left())
    wait_idle(qtbot, window)
    conv = window.controller.current
    first = tool_turns(window)[0]
    index = conv.turns.index(first) + 1  # the answer that used the result
    window.controller.regenerate(index)
    wait_idle(qtbot, window)
    assert conv.versions(index) == (2, 2)
    assert conv.turns[index - 1] is first and first.text == "5"  # the result is not run again
    window.controller.switch(index, -1)
    assert conv.versions(index) == (1, 2) and conv.turns[index - 1] is first
