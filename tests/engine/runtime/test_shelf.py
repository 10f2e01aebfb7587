"""The window's kept models (engine.runtime.shelf): the least recently used go first, to fit
the memory and the count."""

from __future__ import annotations

import pytest

from engine.runtime.fleet import BUDGET_SHARE
from engine.runtime.shelf import Shelf

GB = 10**9


def test_kept_models_are_taken_back_most_recent_last() -> None:
    shelf: Shelf[str, str] = Shelf(max_kept=3)
    for name in "abc":
        assert shelf.room_for(1, 100 * GB) == []
        shelf.put(name, name.upper(), 1)
    assert shelf.take("a") == "A" and shelf.take("z") is None
    assert shelf.values() == ["A", "C", "B"]  # most recently used first
    assert shelf.room_for(1, 100 * GB) == ["B"]  # the count: 3 kept at most
    shelf.put("d", "D", 1)
    assert len(shelf) == 3 and "b" not in shelf
    shelf.take("c")
    shelf.max_kept = 1
    assert shelf.trim() == ["A", "D"] and shelf.values() == ["C"]


def test_the_memory_free_plus_what_the_shelf_holds_is_the_budget() -> None:
    shelf: Shelf[str, str] = Shelf(max_kept=8)
    shelf.put("a", "A", 4 * GB)
    shelf.put("b", "B", 4 * GB)
    shelf.take("a")
    free = int(6 * GB / BUDGET_SHARE)  # room for 6 GB more
    assert shelf.room_for(6 * GB, free) == []
    assert shelf.room_for(9 * GB, free) == ["B"]  # 8 GB held, 6 free: b's 4 make 10 room
    assert shelf.values() == ["A"]
    assert shelf.room_for(100 * GB, free) == ["A"]  # too large for all: everything goes,
    assert len(shelf) == 0 and shelf.used == 0  # and the load is tried anyway


def test_clear_and_remove() -> None:
    shelf: Shelf[str, str] = Shelf()
    shelf.put("a", "A", 1)
    shelf.put("b", "B", 2)
    assert shelf.remove("a") == "A" and shelf.remove("a") is None
    assert shelf.clear() == ["B"] and len(shelf) == 0
    with pytest.raises(ValueError):
        Shelf(max_kept=0)
