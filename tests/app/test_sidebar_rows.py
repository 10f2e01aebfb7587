"""The conversation list follows the library: another conversation shown or a title changed
changes the rows that differ and keeps the others (a list of 10,000 is not rebuilt at each
click); conversations added or removed rebuild it; a blank conversation shown marks no row."""

from __future__ import annotations

from pathlib import Path

from app.views.sidebar import Sidebar
from engine.conversation.library import Library
from engine.conversation.tree import Conversation


def rows(sidebar: Sidebar) -> list[str]:
    return [sidebar.list.item(i).text() for i in range(sidebar.list.count())]


def test_rows_follow_the_library(qtbot, tmp_path: Path) -> None:
    library = Library()
    convs = [Conversation(f"Chat {i}", tmp_path / f"Chat {i}.duet") for i in range(4)]
    library.add_saved(convs)
    sidebar = Sidebar()
    qtbot.addWidget(sidebar)
    sidebar.follow(library)
    library.show(convs[1])
    assert rows(sidebar) == ["Chat 0", "Chat 1", "Chat 2", "Chat 3"]
    items = [sidebar.list.item(i) for i in range(4)]
    assert sidebar.list.currentItem() is items[1]
    library.show(convs[3])  # another one shown: the same rows, another marked
    assert [sidebar.list.item(i) for i in range(4)] == items
    assert sidebar.list.currentItem() is items[3] and sidebar.list.selectedItems() == [items[3]]
    convs[2].title = "Trip"
    convs[2].notify("meta")  # a title changed: that row's text
    assert rows(sidebar) == ["Chat 0", "Chat 1", "Trip", "Chat 3"]
    assert [sidebar.list.item(i) for i in range(4)] == items
    assert sidebar.list.currentItem() is items[3]
    blank = library.new()  # shown, not listed: no row is current
    assert rows(sidebar) == ["Chat 0", "Chat 1", "Trip", "Chat 3"]
    assert sidebar.list.currentItem() is None and sidebar.list.selectedItems() == []
    library.remove(convs[0])  # one fewer: rebuilt
    assert rows(sidebar) == ["Chat 1", "Trip", "Chat 3"] and blank is library.current
    library.show(convs[1])
    assert sidebar.list.currentItem().text() == "Chat 1"
