"""Projects in the window: conversations dragged onto a project move into it, choosing a project
narrows the list and its search to it, a chat started in a project begins with the project's
system prompt (a real reply of the small model) and joins it when saved, a project's preset
gives its conversations their sampling, its files go on the first message of each chat started in
it, and the project follows renamed and deleted files."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QMenu

from app.views.projects_view import ALL
from engine.conversation.presets import find, preset
from engine.conversation.projects import Projects
from tests.conftest import REPLY_WAIT_S

DATA = Path(__file__).resolve().parents[1] / "data" / "imports"
LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def visible(window) -> list[str]:
    return sorted(window.sidebar.list.shown_texts())


def row(lst, text: str):
    """The project list's item ``text``."""
    return next(lst.item(i) for i in range(lst.count()) if lst.item(i).text() == text)


def drag(window, titles: list[str], project: str) -> None:
    """Drag the conversations ``titles`` from the list onto ``project``."""
    rows = window.sidebar.list.rows
    mime = rows.mimeData([rows.index(i) for i, r in enumerate(rows.rows) if r[1] in titles])
    target = window.sidebar.projects
    at = QPointF(target.visualItemRect(row(target, project)).center())
    target.dropEvent(QDropEvent(at, Qt.DropAction.MoveAction, mime, Qt.MouseButton.LeftButton,
                                Qt.KeyboardModifier.NoModifier))


def imported(qtbot, window) -> list[str]:
    with qtbot.waitSignal(window.importing.finished, timeout=LONG_MS):
        window.importing.start(sorted(DATA.glob("*.json")))
    return visible(window)


def test_drag_into_a_project_and_search_in_it(qtbot, window):
    everything = imported(qtbot, window)
    flow = window.projects
    assert flow.create("Japan") == "Japan"
    drag(window, ["Hauptstadt von Japan 🗾"], "Japan")
    projects = window.sidebar.projects
    projects.setCurrentItem(row(projects, "Japan"))
    assert visible(window) == ["Hauptstadt von Japan 🗾"]
    # the search looks in the project only (its saved files through the index)
    with qtbot.waitSignal(window.sidebar.searcher.found, timeout=LONG_MS):
        window.sidebar.search.setText("a")
    assert visible(window) == ["Hauptstadt von Japan 🗾"]
    with qtbot.waitSignal(window.sidebar.searcher.found, timeout=LONG_MS):
        projects.setCurrentItem(row(projects, ALL))
    assert len(visible(window)) > 1
    window.sidebar.search.setText("")
    assert visible(window) == everything
    # back out of the project: dragged onto "All conversations"
    drag(window, ["Hauptstadt von Japan 🗾"], ALL)
    projects.setCurrentItem(row(projects, "Japan"))
    assert visible(window) == []
    assert Projects().members == {}


def test_a_chat_started_in_a_project_has_its_system_prompt_and_files(qtbot, window, driver,
                                                                     settings, smol_path,
                                                                     tmp_path):
    settings.update({"autosave": True, "system_prompt": "You are terse."})
    flow = window.projects
    flow.create("French")
    flow.set_prompt("French", "Answer in French.")
    glossary, picture = tmp_path / "glossary.md", tmp_path / "cat.png"
    glossary.write_text("# Glossary\n\nchat: cat\n", encoding="utf-8")
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    with qtbot.waitSignal(flow.changed, timeout=LONG_MS):
        flow.add_files("French", [glossary, picture, tmp_path / "missing.txt"])
    assert [a.name for a in Projects().projects["French"].files] == ["glossary.md"]
    assert window.notice.text() == "cannot read missing.txt: no such file"  # one line each
    driver.load(smol_path)
    window.sidebar.projects.setCurrentItem(row(window.sidebar.projects, "French"))
    window.controller.new()
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        driver.send("Hello!")
    conv = window.controller.current
    assert [(t.role, t.text) for t in conv.turns][:2] == [("system", "Answer in French."),
                                                         ("user", "Hello!")]
    assert [a.name for a in conv.turns[1].attachments] == ["glossary.md"]  # the project's files
    assert "chat: cat" in conv.turns[1].attachments[0].text
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS):
        driver.send("Merci")  # the first message keeps them; later ones do not get them again
    assert [len(t.attachments) for t in conv.turns if t.role == "user"] == [1, 0]
    path = saved.args[0].path
    assert Projects().of(path).name == "French" and visible(window) == [conv.title]
    # the same in no project: the settings' prompt
    window.sidebar.projects.setCurrentItem(row(window.sidebar.projects, ALL))
    window.controller.new()
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as other:
        driver.send("Hi there")
    assert window.controller.current.turns[0].text == "You are terse."
    assert window.controller.current.turns[1].attachments == ()
    assert Projects().of(other.args[0].path) is None
    # the file renamed, then deleted: the project follows
    window.controller.files.rename(conv.id, "Bonjour")
    assert Projects().of(path) is None and Projects().of(path.with_name("Bonjour.duet")).name == "French"
    window.controller.files.delete(conv.id)
    assert Projects().members == {}


def test_a_projects_preset_is_used_by_its_conversations(window, settings):
    """A project's preset gives its conversations their sampling, drafter and (where the
    project has no system prompt of its own) system prompt; a conversation's own preset wins."""
    settings.update({"system_prompt": "You are terse.", "temperature": 0.8})
    window.presets.presets = [*window.presets.presets, preset("Plain", "Be plain.", "none",
                                                              temperature=0.3)]
    flow, cs = window.projects, window.controller.chat_settings
    flow.create("Code")
    window.sidebar.projects.setCurrentItem(row(window.sidebar.projects, "Code"))
    conv = window.controller.new()  # starts in the project shown
    assert cs.sampling_for(conv).temperature == 0.8 and cs.system_prompt(conv) == "You are terse."
    assert cs.drafts(conv)
    menu = QMenu()
    window.sidebar.projects._preset_menu(menu, "Code")
    assert [a.text() for a in menu.actions()][:2] == ["None", "Assistant"]
    next(a for a in menu.actions() if a.text() == "Plain").trigger()
    assert Projects().projects["Code"].preset == "Plain"
    assert cs.sampling_for(conv).temperature == 0.3 and cs.system_prompt(conv) == "Be plain."
    assert not cs.drafts(conv)
    flow.set_prompt("Code", "Answer in Python.")  # the project's own prompt comes first
    assert cs.system_prompt(conv) == "Answer in Python."
    cs.apply_preset(find(window.presets.presets, "Precise"), conv)  # its own preset wins
    assert cs.sampling_for(conv).temperature == 0.0 and cs.drafts(conv)
    assert cs.system_prompt(conv) == find(window.presets.presets, "Precise").system_prompt
    conv.settings = {}
    flow.move([conv.id], None)  # in no project: the settings again
    assert cs.sampling_for(conv).temperature == 0.8 and cs.drafts(conv)
    assert cs.system_prompt(conv) == "You are terse."


def test_an_imported_export_brings_its_projects_into_the_window(qtbot, window, tmp_path):
    """The import writes projects.json from its thread; the window reads it again, so a
    project made afterwards keeps the imported ones (an old copy in memory would erase them)."""
    from engine.conversation.archive import export_all
    from engine.conversation.importers.run import import_files

    source = tmp_path / "source"
    import_files([DATA / "claude-conversations.json"], source)
    theirs = Projects(source)
    theirs.add("Travel")
    theirs.set_prompt("Travel", "Answer briefly.")
    theirs.move(sorted(source.glob("*.duet"))[:1], "Travel")
    export_all(tmp_path / "all.zip", source)
    with qtbot.waitSignal(window.importing.finished, timeout=LONG_MS):
        window.importing.start([tmp_path / "all.zip"])
    flow = window.projects
    assert flow.projects.names == ["Travel"]
    assert row(window.sidebar.projects, "Travel").toolTip().startswith("System prompt: Answer")
    flow.create("Work")
    assert Projects().names == ["Travel", "Work"] and len(Projects().members) == 1
