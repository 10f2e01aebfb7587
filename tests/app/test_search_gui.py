"""The sidebar's search hides the conversations whose title and text lack the query: those open
in memory, the saved ones not opened yet through the search index, off the GUI thread."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication
from pytestqt.qtbot import QtBot

from app.control.search import ConversationSearch
from app.control.settings import Settings
from app.engine_link.messages import Saved
from app.views.main_window import MainWindow
from engine import paths
from engine.conversation.search_index import SearchIndex
from engine.conversation.session import store
from engine.conversation.store import tree_to_json
from engine.conversation.tree import Conversation
from engine.events import Done, Stats
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # a safety net: as long as a test may run (tests/conftest.py)


def test_search_filters_the_list(qtbot, window) -> None:
    c = window.controller
    c.current.add_user("Owls hunt at night")
    other = c.new()
    other.add_user("Tell me about rivers")
    shown = window.sidebar.list.shown_texts
    assert sorted(shown()) == ["Owls hunt at night •", "Tell me about rivers •"]
    qtbot.keyClicks(window.sidebar.search, "NIGHT")
    assert shown() == ["Owls hunt at night •"]
    window.sidebar.search.clear()
    assert len(shown()) == 2


def _saved(ctx: LlamaSequence, title: str, question: str, replies: tuple[str, ...]) -> Path:
    """A conversation saved in the conversations folder, the last of ``replies`` shown."""
    c = Conversation()
    c.add_user(question)
    for i, text in enumerate(replies):
        c.begin_reply(None if i == 0 else 1)
        c.finish_reply(Done("stop", text, (1,), Stats()))
    path = paths.conversations_dir() / f"{title}.duet"
    path.parent.mkdir(parents=True, exist_ok=True)
    store.save_contexts(path, ctx, None, c.engine_messages(), with_kv=False,
                        settings={"title": title, "tree": tree_to_json(c)})
    return path


@pytest.fixture
def saved(home: Path, smol: Model) -> list[Path]:
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as ctx:
        return [_saved(ctx, "Owls", "Tell me about owls", ("They hunt at night.", "Birds.")),
                _saved(ctx, "Rivers", "And rivers?", ("They flow to the sea.",))]


@pytest.fixture
def opened_on(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that open a .duet file, as they do."""
    threads: list[str] = []
    real = os.open

    def recording(path: str | Path, *args: int, **kwargs: int) -> int:
        if str(path).endswith(".duet"):
            threads.append(threading.current_thread().name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording)
    return threads


@pytest.fixture
def window_with_saved(qtbot: QtBot, settings: Settings, saved: list[Path]) -> Iterator[MainWindow]:
    w = MainWindow(settings, autoload=False)  # not shown: no focus makes a row current
    qtbot.addWidget(w)
    yield w
    w.close()


def _shown(w: MainWindow) -> Callable[[], list[str]]:
    return lambda: sorted(w.sidebar.list.shown_texts())


def test_saved_conversations_are_searched_off_the_gui_thread(
        qtbot: QtBot, window_with_saved: MainWindow, opened_on: list[str]) -> None:
    w = window_with_saved
    shown = _shown(w)
    assert shown() == ["Owls", "Rivers"]
    assert not any(c.loaded for c in w.controller.library.listed())
    qtbot.keyClicks(w.sidebar.search, "HUNT")  # in the reply's older version
    qtbot.waitUntil(lambda: shown() == ["Owls"], timeout=LONG_MS)
    w.sidebar.search.clear()
    assert shown() == ["Owls", "Rivers"]
    qtbot.keyClicks(w.sidebar.search, "sea")
    qtbot.waitUntil(lambda: shown() == ["Rivers"], timeout=LONG_MS)
    assert opened_on, "the search read the files somewhere"  # they were indexed, once each
    assert threading.main_thread().name not in opened_on
    assert not any(c.loaded for c in w.controller.library.listed())  # the index answered


def test_the_index_follows_saved_renamed_and_deleted_conversations(
        qtbot: QtBot, window_with_saved: MainWindow, saved: list[Path], smol: Model) -> None:
    w, c = window_with_saved, window_with_saved.controller
    with qtbot.waitSignal(w.sidebar.searcher.found, timeout=LONG_MS):
        w.sidebar.search.setText("they")  # both are in the index now
    owls, rivers = sorted(c.library.listed(), key=lambda conv: conv.title)
    c.files.rename(owls.id, "Birds of the night")
    c.files.delete(rivers.id)
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as ctx:
        moles = _saved(ctx, "Moles", "Moles?", ("They dig.",))
    c.files.on_saved(Saved("the worker's answer", moles, with_kv=False))
    w.sidebar.searcher.close()  # waits for the updates sent to the index
    with sqlite3.connect(SearchIndex().db) as conn:
        indexed = sorted(row[0] for row in conn.execute("SELECT path FROM files"))
    assert indexed == [str(saved[0].with_name("Birds of the night.duet")), str(moles)]


def test_a_newer_query_supersedes_an_older_one(qtbot: QtBot, tmp_path: Path,
                                               saved: list[Path]) -> None:
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    class Gated(SearchIndex):
        def search(self, query: str, files: Sequence[Path]) -> list[Path]:
            ran.append(query)
            started.set()
            assert release.wait(REPLY_WAIT_S)
            return super().search(query, files)

    search = ConversationSearch(Gated(tmp_path / "index.sqlite3"))
    found: list[tuple[str, frozenset[Path]]] = []
    search.found.connect(lambda query, hits: found.append((query, hits)))
    search.search("hunt", saved)
    assert started.wait(REPLY_WAIT_S)
    search.search("flow", saved)  # superseded before it starts: never run
    with qtbot.waitSignal(search.found, timeout=LONG_MS):
        search.search("sea", saved)
        release.set()
    search.close()  # every answer sent is now queued to the GUI thread
    QCoreApplication.processEvents()
    assert ran == ["hunt", "sea"] and found == [("sea", frozenset({saved[1]}))]
