"""The conversation list follows the library: another conversation shown or a title changed
changes the rows that differ, with no reset of the list's model (a list of 10,000 is not rebuilt
at each click); conversations added or removed reset it; a blank conversation shown marks no
row."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from app.views.sidebar import Sidebar
from engine.conversation.library import Library
from engine.conversation.tree import Conversation


def rows(sidebar: Sidebar) -> list[str]:
    return [sidebar.list.text(i) for i in range(sidebar.list.count())]


def listing(qtbot, folder: Path, n: int) -> tuple[Library, list[Conversation], Sidebar]:
    """A library of ``n`` saved conversations ("Chat 0"...) and a sidebar that follows it."""
    library = Library()
    convs = [Conversation(f"Chat {i}", folder / f"Chat {i}.duet") for i in range(n)]
    library.add_saved(convs)
    sidebar = Sidebar()
    qtbot.addWidget(sidebar)
    sidebar.follow(library)
    return library, convs, sidebar


def test_rows_follow_the_library(qtbot, tmp_path: Path) -> None:
    library, convs, sidebar = listing(qtbot, tmp_path, 4)
    resets: list[int] = []
    sidebar.list.rows.modelReset.connect(lambda: resets.append(1))
    library.show(convs[1])
    assert rows(sidebar) == ["Chat 0", "Chat 1", "Chat 2", "Chat 3"] and len(resets) == 1
    assert sidebar.list.current_text() == "Chat 1"
    library.show(convs[3])  # another one shown: the same rows, another marked
    assert sidebar.list.current_text() == "Chat 3" and sidebar.list.selected_ids() == [convs[3].id]
    convs[2].title = "Trip"
    convs[2].notify("meta")  # a title changed: that row's text
    assert rows(sidebar) == ["Chat 0", "Chat 1", "Trip", "Chat 3"]
    assert sidebar.list.current_text() == "Chat 3" and len(resets) == 1  # never rebuilt
    blank = library.new()  # shown, not listed: no row is current
    assert rows(sidebar) == ["Chat 0", "Chat 1", "Trip", "Chat 3"]
    assert sidebar.list.current_text() is None and sidebar.list.selected_ids() == []
    library.remove(convs[0])  # one fewer: rebuilt
    assert rows(sidebar) == ["Chat 1", "Trip", "Chat 3"] and blank is library.current
    assert len(resets) == 2
    library.show(convs[1])
    assert sidebar.list.current_text() == "Chat 1"


def test_a_click_shows_that_conversation_and_rows_drag_out_as_ids(qtbot, tmp_path: Path) -> None:
    from app.views.projects_view import dragged_ids

    library, convs, sidebar = listing(qtbot, tmp_path, 3)
    library.show(convs[0])
    sidebar.show()
    picked: list[str] = []
    sidebar.selected.connect(picked.append)
    qtbot.mouseClick(sidebar.list.viewport(), Qt.MouseButton.LeftButton,
                     pos=sidebar.list.visualRect(sidebar.list.rows.index(2)).center())
    assert picked == [convs[2].id]
    model = sidebar.list.rows
    assert dragged_ids(model.mimeData([model.index(0), model.index(2)])) == [convs[0].id,
                                                                              convs[2].id]
