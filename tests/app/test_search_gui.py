"""The sidebar's search hides the conversations whose title and text lack the query."""

from __future__ import annotations


def test_search_filters_the_list(qtbot, window) -> None:
    c = window.controller
    c.current.add_user("Owls hunt at night")
    other = c.new()
    other.add_user("Tell me about rivers")
    shown = lambda: [window.sidebar.list.item(i).text() for i in range(window.sidebar.list.count())  # noqa: E731
                     if not window.sidebar.list.item(i).isHidden()]
    assert sorted(shown()) == ["Owls hunt at night •", "Tell me about rivers •"]
    qtbot.keyClicks(window.sidebar.search, "NIGHT")
    assert shown() == ["Owls hunt at night •"]
    window.sidebar.search.clear()
    assert len(shown()) == 2
