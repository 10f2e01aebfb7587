"""The Qt-free conversation model: branches, the path shown, continuing, storage, the library."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from engine.chat.messages import Attachment, ToolCall
from engine.conversation.library import Library
from engine.conversation.store import describe, tree_from_json, tree_to_json
from engine.conversation.tree import Conversation
from engine.events import Done, Stats, Token


def done(text: str, reason: str = "stop", n: int = 3) -> Done:
    return Done(reason, text, tuple(range(n)), Stats(n_tokens=n, gen_s=0.5, proposed=4,
                                                      accepted=2))


def answered(conv: Conversation, text: str, regenerate: int | None = None) -> None:
    conv.begin_reply(regenerate)
    conv.append_tokens([Token(1, text[:2]), Token(2, text[2:], True, "ngram")])
    conv.finish_reply(done(text))


def texts(conv: Conversation) -> list[str]:
    return [t.text for t in conv.turns]


def chat() -> Conversation:
    c = Conversation()
    c.add_user("one", "be brief")
    answered(c, "first reply")
    c.add_user("two")
    answered(c, "second reply")
    return c


def test_regenerate_keeps_the_old_reply_as_a_version() -> None:
    c = chat()
    c.begin_reply(4)
    assert texts(c) == ["be brief", "one", "first reply", "two", ""]
    assert [m.content for m in c.engine_messages()] == ["be brief", "one", "first reply", "two"]
    c.finish_reply(done("other reply"))
    assert c.versions(4) == (2, 2) and c.versions(2) == (1, 1)
    assert c.switch(4, -1) and texts(c)[-1] == "second reply" and c.versions(4) == (1, 2)
    assert not c.switch(4, -1)  # already the first
    assert c.switch(4, +1) and texts(c)[-1] == "other reply"


def test_edit_starts_a_branch_and_the_old_one_keeps_what_followed() -> None:
    c = chat()
    c.edit(1, "uno")
    assert texts(c) == ["be brief", "uno"]
    answered(c, "reply to uno")
    assert c.versions(1) == (2, 2)
    c.switch(1, -1)  # back to the first branch: its whole continuation is shown again
    assert texts(c) == ["be brief", "one", "first reply", "two", "second reply"]
    c.switch(1, +1)
    assert texts(c) == ["be brief", "uno", "reply to uno"]


def test_an_edited_message_keeps_its_files() -> None:
    garden = Attachment("garden.txt", "text", "ab" * 32, "Tomatoes by the south wall.")
    c = Conversation()
    c.add_user("What grows by the wal?", attachments=(garden,))
    c.edit(0, "What grows by the wall?")
    assert c.turns[0].attachments == (garden,) and c.versions(0) == (2, 2)


def test_streaming_spans_and_abort() -> None:
    c = Conversation()
    c.add_user("hi")
    c.begin_reply()
    c.append_tokens([Token(1, "Hel"), Token(2, "lo", True, "ngram"), Token(3, " you", True)])
    assert c.streaming.spans == [(3, 9)]
    assert not c.switch(1, 1)  # no switching while a reply streams
    c.abort_reply()
    assert c.turns[-1].reason == "error" and c.streaming is None
    c.begin_reply(1)
    c.abort_reply()  # nothing came: the empty version is removed, the partial one shown
    assert texts(c) == ["hi", "Hello you"] and c.versions(1) == (1, 1)


def test_continue_appends_to_the_same_reply() -> None:
    c = Conversation()
    c.add_user("count")
    c.begin_reply()
    c.finish_reply(done("1 2 3", reason="length"))
    c.resume_reply()
    c.append_tokens([Token(4, " 4", True)])
    c.finish_reply(done(" 4 5"))
    turn = c.turns[-1]
    assert turn.text == "1 2 3 4 5" and turn.reason == "stop" and turn.spans == [(5, 7)]
    assert len(c.turns) == 2


def test_subscribers_hear_each_change() -> None:
    c = Conversation()
    heard = []
    c.subscribe(lambda conv, change: heard.append((change.kind, change.index)))
    c.add_user("hello there")
    c.begin_reply()
    c.append_tokens([Token(1, "x")])
    c.finish_reply(done("x"))
    assert heard == [("meta", 0), ("path", 0), ("path", 1), ("text", 1), ("text", 1)]


def test_system_prompt_change_keeps_the_history_under_a_new_version() -> None:
    c = chat()
    assert c.set_system("be verbose") == 4  # four messages follow it: none can be reused
    assert texts(c)[0] == "be verbose" and texts(c)[1:] == texts(chat())[1:]
    assert c.versions(0) == (2, 2)
    c.switch(0, -1)
    assert texts(c)[0] == "be brief"
    plain = Conversation()
    plain.add_user("q")
    assert plain.set_system("sys") == 1 and texts(plain) == ["sys", "q"]


def test_tree_round_trips_through_json_with_stats_and_spans() -> None:
    c = chat()
    answered(c, "another second", regenerate=4)
    c.edit(1, "uno")
    answered(c, "reply to uno")
    c.switch(1, -1)
    data = json.loads(json.dumps(tree_to_json(c)))
    root = tree_from_json(data, c.engine_messages())
    assert root is not None
    d = Conversation()
    d.set_root(root)
    assert texts(d) == texts(c)
    assert d.versions(1) == (1, 2) and d.versions(4) == (2, 2)
    last = d.turns[-1]
    assert last.stats == c.turns[-1].stats and last.spans == [(2, len("another second"))]
    assert "8 messages in all, 5 on the path shown, 2 messages with several versions" == \
        describe(data)


def test_a_tree_that_does_not_match_the_messages_or_is_damaged_is_ignored() -> None:
    c = chat()
    data = tree_to_json(c)
    assert tree_from_json(data, c.engine_messages()[:-1]) is None
    assert tree_from_json(None, c.engine_messages()) is None  # an old file: no tree
    bad = json.loads(json.dumps(data))
    bad["nodes"][2]["parent"] = 7  # a forward reference
    assert tree_from_json(bad, c.engine_messages()) is None
    bad = json.loads(json.dumps(data))
    bad["nodes"][2]["spans"] = [[0, 10_000]]
    assert tree_from_json(bad, c.engine_messages()) is None
    assert describe({"version": 1, "nodes": "x"}).startswith("invalid")


CALL = ToolCall("call_1", "get_current_time", '{"timezone": "Asia/Tokyo"}')
OTHER = ToolCall("call_2", "read_file", '{"path": "notes.txt"}')


def with_tools() -> Conversation:
    """A reply with two tool calls: one ran, one denied; then the answer."""
    c = Conversation()
    c.add_user("What time is it in Tokyo?")
    c.begin_reply()
    c.finish_reply(done("Let me check."), [CALL, OTHER])
    ran = c.add_tool(CALL)
    c.run_tool(ran)
    c.finish_tool(ran, '{"time": "09:00"}')
    c.finish_tool(c.add_tool(OTHER), "", "denied")
    answered(c, "It is 9 am.")
    return c


def tool_fields(conv: Conversation) -> list[tuple[Any, ...]]:
    return [(t.role, t.text, t.tool_calls, t.tool_call_id, t.name, t.reason, t.ask)
            for t in conv.turns]


def test_tool_turns_round_trip_through_json() -> None:
    c = with_tools()
    data = json.loads(json.dumps(tree_to_json(c)))
    assert data["nodes"][1]["tool_calls"] == [
        {"id": "call_1", "name": "get_current_time", "arguments": '{"timezone": "Asia/Tokyo"}'},
        {"id": "call_2", "name": "read_file", "arguments": '{"path": "notes.txt"}'}]
    assert data["nodes"][3]["tool_call_id"] == "call_2" and data["nodes"][3]["name"] == "read_file"
    root = tree_from_json(data, c.engine_messages())
    assert root is not None
    d = Conversation()
    d.set_root(root)
    assert tool_fields(d) == tool_fields(c)
    assert d.turns[3].reason == "denied" and d.call_of(2) == CALL and d.call_of(3) == OTHER
    # a tree without tool turns is written exactly as before: no new keys
    assert all(set(n) == {"parent", "role", "text", "time", "chosen", "spans", "stats", "reason",
                          "think_s"} for n in tree_to_json(chat())["nodes"])


def test_a_tool_turn_still_waiting_is_not_saved() -> None:
    c = Conversation()
    c.add_user("Time?")
    c.begin_reply()
    c.finish_reply(done(""), [CALL, OTHER])
    waiting = c.add_tool(CALL)
    assert waiting.ask and [n["role"] for n in tree_to_json(c)["nodes"]] == ["user", "assistant"]
    c.add_tool(OTHER)  # queued after the one waiting: it goes with it
    assert len(tree_to_json(c)["nodes"]) == 2
    nodes = tree_to_json(c, streaming=True)["nodes"]
    assert [n.get("tool_call_id") for n in nodes] == [None, None, "call_1", "call_2"]
    assert all("ask" not in n for n in nodes)
    root = tree_from_json(tree_to_json(c), c.engine_messages()[:2])
    assert root is not None


def test_the_path_is_compared_with_the_messages_tool_fields_and_all() -> None:
    c = with_tools()
    data = tree_to_json(c)
    messages = list(c.engine_messages())
    assert tree_from_json(data, messages) is not None
    changed = ToolCall("call_1", "get_current_time", '{"timezone": "Europe/Paris"}')
    for i, m in ((1, replace(messages[1], tool_calls=(changed, OTHER))),
                 (1, replace(messages[1], tool_calls=())),
                 (2, replace(messages[2], tool_call_id="call_9")),
                 (2, replace(messages[2], name=None))):
        assert tree_from_json(data, messages[:i] + [m] + messages[i + 1:]) is None


Mutation = Callable[[list[dict[str, Any]]], None]
TOOL_MUTATIONS: list[Mutation] = [
    lambda n: n[1].update(tool_calls="call_1"),
    lambda n: n[1].update(tool_calls=[n[1]["tool_calls"][0]] * 65),
    lambda n: n[1]["tool_calls"].append(None),
    lambda n: n[1]["tool_calls"][0].pop("id"),
    lambda n: n[1]["tool_calls"][0].update(type="function"),
    lambda n: n[1]["tool_calls"][0].update(id=7),
    lambda n: n[1]["tool_calls"][0].update(name="n" * 257),
    lambda n: n[1]["tool_calls"][0].update(arguments={"timezone": "UTC"}),
    lambda n: n[1]["tool_calls"][0].update(arguments="x" * 1_000_001),
    lambda n: n[2].update(tool_call_id=None),
    lambda n: n[2].update(tool_call_id="c" * 257),
    lambda n: n[2].update(name=["get_current_time"]),
    lambda n: n[2].update(role="function"),
]


@pytest.mark.parametrize("mutate", TOOL_MUTATIONS, ids=range(len(TOOL_MUTATIONS)))
def test_malformed_tool_fields_make_the_tree_ignored(mutate: Mutation) -> None:
    c = with_tools()
    data = json.loads(json.dumps(tree_to_json(c)))
    mutate(data["nodes"])
    assert tree_from_json(data, c.engine_messages()) is None
    assert describe(data).startswith("invalid")


def test_tool_fields_at_their_limits_are_read() -> None:
    c = Conversation()
    c.add_user("Go.")
    c.begin_reply()
    longest = ToolCall("i" * 256, "n" * 256, "a" * 1_000_000)
    c.finish_reply(done(""), [longest] + [CALL] * 63)
    root = tree_from_json(json.loads(json.dumps(tree_to_json(c))), c.engine_messages())
    assert root is not None and root.children[0].children[0].turn.tool_calls[0] == longest


def test_a_long_chat_is_stored_flat() -> None:
    c = Conversation()
    for i in range(2000):
        c.add_user(f"q{i}")
        answered(c, f"a{i}")
    data = tree_to_json(c)
    assert max(n["parent"] for n in data["nodes"]) == 3998
    root = tree_from_json(json.loads(json.dumps(data)), c.engine_messages())
    assert root is not None


def test_library_lists_no_blank_conversation_and_drops_one_left_behind() -> None:
    lib = Library()
    events = []
    lib.subscribe(lambda kind, conv: events.append(kind))
    blank = lib.new()
    assert lib.listed() == [] and lib.new() is blank  # Ctrl+N twice: still one blank
    blank.add_user("hello")
    assert lib.listed() == [blank]
    other = lib.new()
    assert other is not blank and lib.current is other
    lib.show(blank)
    assert other not in lib.conversations  # the blank one left behind is gone
    assert "current" in events and "list" in events
    lib.remove(blank)
    assert lib.current is None


def test_saved_conversations_join_the_list_by_date_in_one_change() -> None:
    """An import's new files go among the others by their last change (most recent first), the
    list's own order kept, and the listeners hear one change however many came."""
    lib = Library()
    old = [Conversation(t) for t in ("c", "e", "g")]  # listed newest first: c (30) e (10) g (5)
    lib.add_saved(old)
    heard: list[str] = []
    lib.subscribe(lambda kind, _c: heard.append(kind))
    when = {"c": 30, "e": 10, "g": 5, "a": 40, "d": 20, "f": 8, "h": 1}
    new = [Conversation(t) for t in ("h", "d", "a", "f")]
    lib.add_saved(new, lambda c: when[c.title])
    assert [c.title for c in lib.conversations] == ["a", "c", "d", "e", "f", "g", "h"]
    assert heard == ["list"]
    new[0].rename("h2")  # they are followed like the others
    assert heard == ["list", "list"]
