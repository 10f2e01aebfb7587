"""The Qt-free conversation model: branches, the path shown, continuing, storage, the library."""

from __future__ import annotations

import json

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
