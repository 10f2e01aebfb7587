"""The collector's pauses (app.control.heap): settled() collects what is garbage first (a cycle
left behind is freed, not frozen), makes its object with the collector paused, then leaves
everything alive out of later collections; off (as in tests' windows), it only makes it."""

from __future__ import annotations

import gc
import weakref

import pytest

from app.control import heap


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture
def enabled(monkeypatch):
    monkeypatch.setattr(heap, "_enabled", True)
    yield
    gc.unfreeze()


def test_settled_frees_garbage_then_freezes_what_lives(enabled) -> None:
    garbage = weakref.ref(Node())
    frozen_before = gc.get_freeze_count()
    seen: list[bool] = []

    def make() -> Node:
        seen.append(gc.isenabled())
        return Node()

    kept = heap.settled(make)
    assert garbage() is None and isinstance(kept, Node)  # collected before, not frozen
    assert seen == [False] and gc.isenabled()  # paused while it made it, on again after
    assert gc.get_freeze_count() > frozen_before


def test_off_it_only_makes() -> None:
    frozen_before = gc.get_freeze_count()
    assert heap.settled(lambda: 7) == 7
    assert gc.get_freeze_count() == frozen_before and gc.isenabled()
