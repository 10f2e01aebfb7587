"""Importing from the window: File → Import… and drops run the real import off the GUI thread,
with its progress in the status bar; the list then holds the new conversations (searchable at
once), a second import adds none, and a bad record is one line that loses nothing."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QDropEvent

from app.control import importing as importing_module
from app.control.drops import sort_drop
from app.views.job_progress import JobProgress
from engine import paths
from engine.conversation.importers.run import ImportReport
from tests.conftest import REPLY_WAIT_S

DATA = Path(__file__).resolve().parents[1] / "data" / "imports"
SAMPLES = sorted(DATA.glob("*.json"))
LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def chatgpt(title: str) -> dict[str, Any]:
    """A ChatGPT conversation of one question and its answer."""
    def node(i: int, role: str, text: str) -> dict[str, Any]:
        return {"id": f"m{i}", "parent": "r" if i == 0 else f"m{i - 1}",
                "children": [] if i else ["m1"],
                "message": {"author": {"role": role}, "create_time": 1.7e9 + i,
                            "content": {"content_type": "text", "parts": [text]}}}
    mapping = {"r": {"id": "r", "message": None, "parent": None, "children": ["m0"]},
               "m0": node(0, "user", f"{title}?"), "m1": node(1, "assistant", f"About {title}.")}
    return {"title": title, "id": title, "create_time": 1.7e9, "update_time": 1.7e9 + 1,
            "mapping": mapping, "current_node": "m1"}


def titles(window) -> list[str]:
    lst = window.sidebar.list
    return [lst.text(i) for i in range(lst.count())]


def run_import(qtbot, window, files: list[Path]) -> ImportReport | None:
    with qtbot.waitSignal(window.importing.finished, timeout=LONG_MS) as done:
        assert window.importing.start(files)
    return done.args[0]


def test_import_lists_the_conversations_and_a_second_adds_none(qtbot, window):
    report = run_import(qtbot, window, SAMPLES)
    assert report is not None and len(report.added) == 8 and report.n_failed == 0
    listed = titles(window)
    assert "Hauptstadt von Japan 🗾" in listed and len(listed) == 8
    assert window.notice.text() == "Imported 8 conversations."
    assert window.findChild(JobProgress, "importProgress").isHidden()
    assert run_import(qtbot, window, SAMPLES).skipped == 8
    assert titles(window) == listed
    assert window.notice.text() == "Imported 0 conversations (8 already there)."
    # searchable at once: the index holds them (the saved ones are not opened to search them)
    with qtbot.waitSignal(window.sidebar.searcher.found, timeout=LONG_MS):
        window.sidebar.search.setText("Hauptstadt")
    shown = window.sidebar.list.shown_texts()
    assert shown == ["Hauptstadt von Japan 🗾"]


def test_an_imported_conversation_continues_in_the_window(qtbot, window, driver, smol_path):
    run_import(qtbot, window, [DATA / "chatgpt-conversations.json"])
    driver.load(smol_path)
    conv = next(c for c in window.controller.conversations if c.title == "Hauptstadt von Japan 🗾")
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS):
        window.controller.select(conv.id)
    before = [(t.role, t.text) for t in conv.turns]
    assert conv.loaded and [r for r, _ in before][:3] == ["system", "user", "assistant"]
    assert window.chat_view.conversation is conv
    reply = driver.send("And of France?")  # its history is read now, the first time
    assert reply.done.stats.n_tokens > 0
    assert [(t.role, t.text) for t in conv.turns][:len(before)] == before
    assert [t.role for t in conv.turns][len(before):] == ["user", "assistant"]


def test_a_bad_record_is_one_line_and_the_others_come_in(qtbot, window, tmp_path):
    loop = chatgpt("loop")
    loop["mapping"]["m0"]["parent"] = "m1"  # m0 → m1 → m0: a cycle
    bad = tmp_path / "conversations.json"
    bad.write_text(json.dumps([chatgpt("fine"), loop, chatgpt("also fine")]), encoding="utf-8")
    report = run_import(qtbot, window, [bad])
    assert sorted(p.stem for p in report.added) == ["also fine", "fine"]
    line = window.notice.text()
    assert line.startswith("Imported 2 conversations; could not import conversations.json: "
                           'record 1 ("loop"): its message tree has a cycle')
    assert "\n" not in line and window.notice.kind == "error"
    assert sorted(titles(window)) == ["also fine", "fine"]


def test_a_file_that_is_not_an_export(qtbot, window, tmp_path):
    (tmp_path / "notes.zip").write_bytes(b"PK\x03\x04 not really a zip")
    report = run_import(qtbot, window, [tmp_path / "notes.zip"])
    assert report.added == [] and report.n_failed == 1
    assert window.notice.text().startswith("Imported 0 conversations; could not import notes.zip")
    assert titles(window) == []


def test_drops_import_exports(qtbot, window, tmp_path):
    """A .zip or a conversations.json dropped anywhere is imported; on the list, any file."""
    assert sort_drop([Path("/d/export.ZIP"), Path("/d/conversations.json"), Path("/d/a.json")]
                     ).imported == (Path("/d/export.ZIP"), Path("/d/conversations.json"))
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(DATA / "claude-conversations.json"))])
    event = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime,
                       Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.importing.finished, timeout=LONG_MS) as done:
        window.sidebar.dropEvent(event)
    assert len(done.args[0].added) == 2 and len(titles(window)) == 2
    assert window.attachments.current() == ()  # imported, not attached
    # a conversation dropped on the list opens (it is Duet's own file, not an export)
    saved = done.args[0].added[0]
    mime.setUrls([QUrl.fromLocalFile(str(saved))])
    event = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime,
                       Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS):
        window.sidebar.dropEvent(event)
    assert window.controller.current.path == saved and not window.importing.busy


@pytest.fixture
def at_record(monkeypatch):
    """``at_record[n] = fn``: fn runs on the import's thread after record n (1-based) of the
    window's import; the thread names the import ran on are in ``at_record["threads"]``."""
    hooks: dict[Any, Any] = {"threads": []}
    real = importing_module.import_files

    def spy(files, folder, *, progress, **kwargs: Any) -> ImportReport:
        hooks["threads"].append(threading.current_thread().name)
        seen = [0]

        def each(p) -> None:
            seen[0] += 1
            if seen[0] in hooks:
                hooks[seen[0]]()
            progress(p)

        return real(files, folder, progress=each, **kwargs)

    monkeypatch.setattr(importing_module, "import_files", spy)
    return hooks


def test_the_import_runs_off_the_gui_thread_while_the_window_goes_on(qtbot, window, tmp_path,
                                                                     at_record):
    """2,000 conversations: the import runs on its own thread, and halfway through it waits for
    a timer of the GUI thread to tick (a GUI thread held by the import would never tick it);
    the list then gets all of them."""
    big = tmp_path / "conversations.json"
    big.write_text(json.dumps([chatgpt(f"chat {i:04}") for i in range(2000)]), encoding="utf-8")
    ticked = threading.Event()
    heartbeat = QTimer()
    heartbeat.timeout.connect(ticked.set)
    heartbeat.start(10)
    at_record[1000] = lambda: (ticked.clear(), ticks.append(ticked.wait(LONG_MS / 1000)))
    ticks: list[bool] = []
    figures: list[float] = []
    window.importing.progress.connect(lambda share, line: figures.append(share))
    report = run_import(qtbot, window, [big])
    heartbeat.stop()
    assert at_record["threads"] == ["duet-import"] and ticks == [True]
    assert len(report.added) == 2000 and len(titles(window)) == 2000
    assert len(figures) >= 2 and figures == sorted(figures)
    assert window.findChild(JobProgress, "importProgress").isHidden()


def test_cancel_keeps_what_was_imported(qtbot, window, tmp_path, at_record):
    big = tmp_path / "conversations.json"
    big.write_text(json.dumps([chatgpt(f"chat {i:03}") for i in range(300)]), encoding="utf-8")
    at_record[5] = window.importing.cancel  # (as the Cancel button does, from the import's thread)
    assert run_import(qtbot, window, [big]) is None
    assert len(list(paths.conversations_dir().glob("*.duet"))) == 5 and len(titles(window)) == 5
    assert window.notice.text() == "Import cancelled; the 5 conversations imported before are kept."
    del at_record[5]
    report = run_import(qtbot, window, [big])
    assert report.skipped == 5 and len(report.added) == 295 and len(titles(window)) == 300


def test_one_import_at_a_time(qtbot, window):
    with qtbot.waitSignal(window.importing.finished, timeout=LONG_MS):
        assert window.importing.start(SAMPLES)
        assert not window.importing.start(SAMPLES)
        assert window.notice.text() == "An import is under way: import these files when it ends."
