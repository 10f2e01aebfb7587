"""``duet-cli generate --session`` on a conversation the app saved: the new turn is appended to
the saved tree, so that the app, reading the file back, still shows every version, the drafted
spans and the reply's figures, plus the new turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.messages import ToolCall
from engine.cli.main import main
from engine.conversation.session import read_meta, store
from engine.conversation.store import tree_from_json, tree_to_json
from engine.conversation.tree import Conversation, Turn
from engine.events import Done, Stats
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model


def _app_conversation() -> Conversation:
    """What the app saves: a reply regenerated once, each version with drafted spans."""
    c = Conversation()
    c.add_user("Say hi.", system_prompt="Be brief.")
    c.begin_reply()
    c.finish_reply(Done("stop", "Hi there!", (1,), Stats(n_tokens=3, gen_s=0.1, accepted=2)))
    c.turns[-1].spans = [(0, 2)]
    c.begin_reply(2)
    c.finish_reply(Done("stop", "Hello!", (2,), Stats(n_tokens=2, gen_s=0.1, accepted=1)))
    c.turns[-1].spans = [(0, 5)]
    return c


def _reopened(path: Path) -> Conversation:
    """The conversation as the app's model reads it back (app/control/controller.py on_opened)."""
    meta = read_meta(path)
    messages = [store.from_saved(m) for m in meta.messages]
    root = tree_from_json(meta.settings.get("tree"), messages)
    assert root is not None, "the saved tree does not match the saved messages"
    conv = Conversation()
    conv.set_root(root)
    return conv


def _stats(turn: Turn) -> Stats:
    assert turn.stats is not None, "the reply's figures were not kept"
    return turn.stats


def _generate(capsys: pytest.CaptureFixture[str], smol_path: Path, path: Path,
              prompt: str) -> dict:
    # smol drafts for itself: at temperature 0 every drafted token is accepted
    code = main(["generate", "--model", str(smol_path), "--draft", str(smol_path),
                 "--drafter", "model", "--no-adaptive", "--temperature", "0", "--max-tokens", "12",
                 "--ctx", "1024", "--threads", "1", "--json", "--session", str(path), prompt])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def test_continuing_an_app_conversation_keeps_its_versions_and_highlights(
        smol: Model, smol_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = _app_conversation()
    path = tmp_path / "chat.duet"
    with LlamaSequence(smol, ContextParams(n_ctx=1024, n_threads=1)) as ctx:
        store.save_contexts(path, ctx, None, app.engine_messages(), with_kv=False,
                            settings={"title": "chat", "preset": "Coder",
                                      "tree": tree_to_json(app)})
    reply = _generate(capsys, smol_path, path, "And goodbye?")

    conv = _reopened(path)
    texts = [t.text for t in conv.turns]
    assert texts == ["Be brief.", "Say hi.", "Hello!", "And goodbye?", reply["text"]]
    assert conv.versions(2) == (2, 2)  # the regenerated reply is still there
    assert conv.turns[2].spans == [(0, 5)] and _stats(conv.turns[2]).accepted == 1
    new = conv.turns[4]
    assert new.role == "assistant" and new.reason == reply["finish_reason"]
    assert _stats(new).n_tokens == reply["n_tokens"]
    assert reply["stats"]["accepted"] > 0 and new.spans  # the drafted tokens are highlighted
    assert sum(b - a for a, b in new.spans) <= len(new.text)
    assert conv.switch(2, -1)  # the first version of the reply, with its own highlight
    assert [t.text for t in conv.turns] == ["Be brief.", "Say hi.", "Hi there!"]
    assert conv.turns[2].spans == [(0, 2)]
    assert read_meta(path).settings["preset"] == "Coder"  # the app's other settings stay


def test_a_conversation_started_from_the_command_line_opens_with_its_highlights(
        smol_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "new.duet"
    first = _generate(capsys, smol_path, path, "Name a colour.")
    second = _generate(capsys, smol_path, path, "And a fruit?")
    conv = _reopened(path)
    assert [t.text for t in conv.turns] == ["Name a colour.", first["text"], "And a fruit?",
                                           second["text"]]
    assert conv.turns[1].spans and conv.turns[3].spans
    assert _stats(conv.turns[3]).n_tokens == second["n_tokens"]


def test_a_file_without_a_tree_gets_one_when_continued(
        smol: Model, smol_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file written by an older Duet (messages only) continues as a linear chat."""
    path = tmp_path / "old.duet"
    with LlamaSequence(smol, ContextParams(n_ctx=1024, n_threads=1)) as ctx:
        store.save_contexts(path, ctx, None, [Turn("user", "Hi.").message(),
                                              Turn("assistant", "Hello.").message()],
                            settings={}, with_kv=False)
    reply = _generate(capsys, smol_path, path, "Bye?")
    conv = _reopened(path)
    assert [t.text for t in conv.turns] == ["Hi.", "Hello.", "Bye?", reply["text"]]


def test_continuing_a_conversation_with_tool_turns_keeps_them(
        smol: Model, smol_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The app's tool call, its result (and a denied one) survive a turn from the command line."""
    call = ToolCall("call_1", "get_current_time", '{"timezone": "Asia/Tokyo"}')
    other = ToolCall("call_2", "delete_file", '{"path": "/tmp/x"}')
    app = Conversation()
    app.add_user("What time is it in Tokyo?")
    app.begin_reply()
    app.finish_reply(Done("stop", "", (1,), Stats(n_tokens=9, gen_s=0.1)), [call, other])
    ran = app.add_tool(call)
    app.run_tool(ran)
    app.finish_tool(ran, '{"time": "09:00"}')
    app.finish_tool(app.add_tool(other), "", "denied")
    app.begin_reply()
    app.finish_reply(Done("stop", "It is 9 am.", (2,), Stats(n_tokens=4, gen_s=0.1)))
    path = tmp_path / "tools.duet"
    with LlamaSequence(smol, ContextParams(n_ctx=1024, n_threads=1)) as ctx:
        store.save_contexts(path, ctx, None, app.engine_messages(), with_kv=False,
                            settings={"tree": tree_to_json(app)})
    reply = _generate(capsys, smol_path, path, "And in Paris?")

    conv = _reopened(path)
    assert [t.role for t in conv.turns] == ["user", "assistant", "tool", "tool", "assistant",
                                           "user", "assistant"]
    assert conv.turns[-1].text == reply["text"] and conv.turns[1].tool_calls == (call, other)
    first, denied = conv.turns[2], conv.turns[3]
    assert (first.tool_call_id, first.name, first.text, first.reason) == (
        "call_1", "get_current_time", '{"time": "09:00"}', None)
    assert (denied.tool_call_id, denied.name, denied.reason) == ("call_2", "delete_file",
                                                                 "denied")
    assert conv.call_of(2) == call and conv.call_of(3) == other
