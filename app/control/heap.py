"""Pauses of the GUI thread for Python's garbage collector, kept short.

A full collection walks every object the process holds, whichever thread triggers it: with the
window's own (Qt wrappers, modules, the conversation list) each of a large import's full
collections held the GUI thread about 100 ms (5,000 conversations, scripts/bench_import_gui.py,
the longest gap 107 ms, 17 ms with this). ``settle()`` collects once, then moves what is left to
the permanent generation that collections skip (``gc.freeze``, meant for this: objects that live
as long as the process). It runs once the window has started; an import's end collects what
the import left, makes the list's new conversations with the collector paused and freezes them
(``settled``, on the import's thread: with the window's objects frozen its collection takes a few
milliseconds, where one that walked 10,000 new list entries took 50). What it froze is never
collected: a conversation deleted later keeps its few hundred bytes of list entry until Duet
quits.

Only the application turns it on (``enable()``, app.__main__): a test process makes many windows
and must be able to collect each one.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
_enabled = False


def enable() -> None:
    global _enabled
    _enabled = True


def settle() -> None:
    """Collect, then leave everything alive now out of later collections (when enabled)."""
    settled(lambda: None)


def settled(make: Callable[[], T]) -> T:
    """``make()`` after a collection, with the collector paused, then everything alive (what
    it made included) out of later collections (when enabled; else only ``make()``)."""
    if not _enabled:
        return make()
    gc.collect()
    gc.disable()
    try:
        made = make()
        gc.freeze()
    finally:
        gc.enable()
    return made
