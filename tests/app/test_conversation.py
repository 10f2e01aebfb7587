"""The conversation model as the GUI uses it, and its files (no Qt, no model)."""

from __future__ import annotations

from pathlib import Path

from app.control.conversation import Conversation, RecentFiles, safe_name, title_from, unique_path
from engine.events import Done, Stats, Token


def _done(text: str, reason: str = "stop") -> Done:
    return Done(reason, text, (1, 2, 3), Stats(n_tokens=3))


def test_streaming_reply_records_drafted_spans() -> None:
    c = Conversation()
    c.add_user("hi", system_prompt="Be brief.")
    assert [t.role for t in c.turns] == ["system", "user"]
    assert c.title == "hi"
    c.begin_reply()
    assert c.engine_messages()[-1].role == "user"  # the streaming turn is not sent
    c.append_tokens([Token(1, "Hel"), Token(2, "lo", True, "ngram"), Token(3, " you", True, "ngram")])
    c.append_tokens([Token(4, "!", False)])
    turn = c.streaming
    assert turn.text == "Hello you!" and turn.spans == [(3, 9)]
    c.finish_reply(_done("Hello you!?"))
    assert c.streaming is None and turn.text == "Hello you!?" and turn.reason == "stop"
    assert [m.role for m in c.engine_messages()] == ["system", "user", "assistant"]


def test_regenerate_and_edit_make_versions() -> None:
    c = Conversation()
    c.add_user("one")
    c.begin_reply()
    c.finish_reply(_done("1"))
    c.add_user("two")
    c.begin_reply()
    c.finish_reply(_done("2"))
    c.begin_reply(3)  # regenerate the last reply: the old one stays as version 1
    assert [m.content for m in c.engine_messages()] == ["one", "1", "two"]
    c.finish_reply(_done("2b"))
    assert c.versions(3) == (2, 2)
    c.edit(2, "deux")  # edit "two": a new branch from there
    assert [m.content for m in c.engine_messages()] == ["one", "1", "deux"]
    assert c.versions(2) == (2, 2) and c.title == "one"


def test_abort_reply_keeps_partial_text_only() -> None:
    c = Conversation()
    c.add_user("x")
    c.begin_reply()
    c.abort_reply()
    assert [t.role for t in c.turns] == ["user"]
    c.begin_reply()
    c.append_tokens([Token(1, "part")])
    c.abort_reply()
    assert c.turns[-1].text == "part" and c.turns[-1].reason == "error"


def test_titles_and_file_names(tmp_path: Path) -> None:
    assert title_from("  a\nb  ") == "a b"
    assert len(title_from("x" * 200)) <= 48
    assert safe_name('a/b:c*?"<>|d') == "a b c d"
    assert safe_name("...") == "conversation"
    first = unique_path(tmp_path, "Chat")
    assert first.name == "Chat.duet"
    first.write_bytes(b"")
    assert unique_path(tmp_path, "Chat").name == "Chat (2).duet"
    assert unique_path(tmp_path, "Chat", keep=first) == first
    assert unique_path(tmp_path, "Chat", taken=[tmp_path / "Chat (2).duet"]).name == "Chat (3).duet"


def test_recent_files_persist_and_stay_bounded(tmp_path: Path) -> None:
    store = tmp_path / "recent.json"
    r = RecentFiles(store)
    for i in range(15):
        r.add(tmp_path / f"c{i}.duet")
    r.add(tmp_path / "c3.duet")
    again = RecentFiles(store)
    assert len(again.items) == 10
    assert again.items[0] == (tmp_path / "c3.duet").resolve()
    again.remove(tmp_path / "c3.duet")
    assert (tmp_path / "c3.duet").resolve() not in RecentFiles(store).items
    store.write_text("garbage")
    assert RecentFiles(store).items == []
