"""The search index of saved conversations (SQLite FTS5): it finds what searching the opened
conversation finds, in every version of every message; it follows renames, deletions and files
changed behind its back, and builds itself again when damaged."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.chat.messages import ToolCall
from engine.conversation.export import matches
from engine.conversation.search_index import SearchIndex
from engine.conversation.session import format as session_format
from engine.conversation.session import store
from engine.conversation.store import tree_to_json
from engine.conversation.tree import Conversation
from engine.events import Done, Stats
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model

Saver = Callable[[str, Conversation], Path]


def _conversation(question: str, first: str, second: str) -> Conversation:
    """A question and two versions of its reply (the second one shown)."""
    c = Conversation()
    c.add_user(question)
    for version, text in enumerate((first, second)):
        c.begin_reply(None if version == 0 else 1)
        c.finish_reply(Done("stop", text, (1,), Stats()))
    return c


@pytest.fixture
def ctx(smol: Model) -> Iterator[LlamaSequence]:
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as c:
        yield c


@pytest.fixture
def save(ctx: LlamaSequence, tmp_path: Path) -> Saver:
    def write(name: str, conv: Conversation) -> Path:
        path = tmp_path / "conversations" / f"{name}.duet"
        path.parent.mkdir(exist_ok=True)
        store.save_contexts(path, ctx, None, conv.engine_messages(), with_kv=False,
                            settings={"tree": tree_to_json(conv)})
        return path

    return write


@pytest.fixture
def index(tmp_path: Path) -> Iterator[SearchIndex]:
    ix = SearchIndex(tmp_path / "cache" / "search.sqlite3")
    yield ix
    ix.close()


def test_it_finds_what_the_opened_conversation_matches(save: Saver, index: SearchIndex) -> None:
    owls = _conversation("Tell me about owls", "Owls hunt at NIGHT.", "Strigiformes, mostly.")
    rivers = _conversation("And rivers?", "Rivers flow.", "Ärger über Flüsse")
    files = [save("owls", owls), save("rivers", rivers)]
    owls.title, rivers.title = "owls", "rivers"
    for query in ("night", "NIGHT", "hunt at", "strigi", "owls", "rivers", "ÄRGER", "flüsse",
                  "t", "ow", "at NIGHT.", " ", "", "night.strigi", "nowhere", '"quoted"', "'",
                  "a*", "OR", "NEAR(", "flow.And"):
        expected = [p for p, conv in zip(files, (owls, rivers)) if matches(conv, query)]
        assert index.search(query, files) == expected, query
    assert index.search("hunt", files) == [files[0]]  # an older version of the reply


def _with_tools(city: str, result: str) -> Conversation:
    """A reply that called a tool for ``city``, the tool's ``result`` and the answer."""
    call = ToolCall("call_1", "get_current_time", f'{{"timezone": "{city}"}}')
    c = Conversation()
    c.add_user("What time is it?")
    c.begin_reply()
    c.finish_reply(Done("stop", "", (1,), Stats()), [call])
    turn = c.add_tool(call)
    c.finish_tool(turn, result)
    c.begin_reply()
    c.finish_reply(Done("stop", "Here you are.", (2,), Stats()))
    return c


def test_it_finds_tool_results_and_calls(save: Saver, index: SearchIndex) -> None:
    tokyo = _with_tools("Asia/Tokyo", "It is 09:00 JST")
    paris = _with_tools("Europe/Paris", "Il est 02:00 CET")
    files = [save("first", tokyo), save("second", paris)]
    tokyo.title, paris.title = "first", "second"
    for query in ("09:00", "jst", "il est", "asia/tokyo", "Europe", "get_current_time",
                  "current", '"timezone"', "time", "nowhere", "cet"):
        expected = [p for p, conv in zip(files, (tokyo, paris)) if matches(conv, query)]
        assert index.search(query, files) == expected, query
    assert index.search("09:00", files) == [files[0]] and index.search("get_current", files) == files
    assert index.search("tokyo", files) == [files[0]]  # only in the call's arguments


def test_a_search_reads_no_file_that_did_not_change(save: Saver, index: SearchIndex,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = save("owls", _conversation("Owls?", "They hunt at night.", "Mostly at night."))
    assert index.search("hunt", [path]) == [path]

    def fail(_path: Path) -> None:
        raise AssertionError("a .duet file was read")

    monkeypatch.setattr(session_format, "read_meta", fail)
    assert index.search("hunt", [path]) == [path] and index.search("moles", [path]) == []


def test_it_follows_files_changed_renamed_and_deleted(save: Saver, index: SearchIndex) -> None:
    path = save("owls", _conversation("Owls?", "They hunt at night.", "Mostly at night."))
    assert index.search("hunt", [path]) == [path]
    save("owls", _conversation("Moles?", "They dig.", "Underground."))  # behind its back
    assert index.search("hunt", [path]) == [] and index.search("dig", [path]) == [path]
    renamed = path.with_name("moles.duet")
    path.rename(renamed)
    index.moved(path, renamed)
    assert index.search("dig", [path, renamed]) == [renamed]
    again = renamed.with_name("burrows.duet")
    renamed.rename(again)  # behind its back: the old name is gone, the new one is read
    assert index.search("dig", [renamed, again]) == [again]
    again.unlink()
    index.forget(again)
    assert index.search("dig", [again]) == []
    index.close()
    with sqlite3.connect(index.db) as conn:
        assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM texts").fetchone()[0] == 0


def test_a_saved_conversation_is_indexed_at_once(save: Saver, index: SearchIndex,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = save("owls", _conversation("Owls?", "They hunt at night.", "Mostly at night."))
    index.update(path)
    monkeypatch.setattr(session_format, "read_meta", None)  # the search must not read it
    assert index.search("hunt", [path]) == [path]


@pytest.mark.parametrize("damage", ["garbage", "torn page"])
def test_a_damaged_index_is_built_again(save: Saver, index: SearchIndex, damage: str,
                                        caplog: pytest.LogCaptureFixture) -> None:
    paths = [save(f"owls {i}", _conversation(f"Owls {i}?", "They hunt.", "At night."))
             for i in range(40)]
    assert index.search("hunt", paths) == paths
    index.close()
    data = bytearray(index.db.read_bytes())
    if damage == "garbage":
        data[:100] = b"not an index" * 8 + bytes(4)
    else:
        data[len(data) // 2:len(data) // 2 + 4096] = b"\xff" * 4096
    index.db.write_bytes(data)
    assert index.search("night", paths) == paths and index.search("moles", paths) == []
    assert "rebuilding the search index" in caplog.text
    index.close()
    with sqlite3.connect(index.db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 40


def test_an_unusable_index_leaves_the_search_to_the_files(save: Saver, tmp_path: Path) -> None:
    path = save("owls", _conversation("Owls?", "They hunt at night.", "Mostly at night."))
    blocker = tmp_path / "not a folder"
    blocker.write_text("a file where the cache folder should be")
    index = SearchIndex(blocker / "search.sqlite3")
    index.update(path)  # logged, not raised
    assert index.search("hunt", [path]) == [path] and index.search("moles", [path]) == []


def test_two_connections_share_one_index(save: Saver, index: SearchIndex, tmp_path: Path,
                                         caplog: pytest.LogCaptureFixture) -> None:
    """The window's search and an import each hold a connection to the same new index: both
    find the tables made, and one whose file was made anew under it (another connection
    rebuilt it) opens the new file instead of failing every write ("readonly database")."""
    other = SearchIndex(index.db)
    owls = save("owls", _conversation("Owls?", "They hunt at night.", "Mostly at night."))
    moles = save("moles", _conversation("Moles?", "They dig.", "Mostly they dig."))
    other.update(owls)
    index.update(moles)
    assert index.search("hunt", [owls, moles]) == [owls]
    assert other.search("dig", [owls, moles]) == [moles]
    other.close()
    index.db.unlink()  # rebuilt by someone else: this connection's file is gone from under it
    other = SearchIndex(index.db)
    other.update(owls)
    index.update(moles)  # (its file moved away: it opens the new one)
    assert "was not updated" not in caplog.text
    assert other.search("dig", [owls, moles]) == [moles]
    other.close()
