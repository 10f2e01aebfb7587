"""Pauses of the GUI thread for Python's garbage collector, kept short.

A full collection walks every object the process holds, whichever thread triggers it: with the
window's own (Qt wrappers, modules, the conversation list) each of a large import's full
collections held the GUI thread about 100 ms (5,000 conversations, scripts/bench_import_gui.py,
the longest gap 107 ms, 17 ms with this). ``settle()`` collects once, then moves what is left to
the permanent generation that collections skip (``gc.freeze``, meant for this: objects that live
as long as the process). It runs once the window has started and after an import has listed its
conversations. What it froze is never collected: a conversation deleted later keeps its few
hundred bytes of list entry until Duet quits.

Only the application turns it on (``enable()``, app.__main__): a test process makes many windows
and must be able to collect each one.
"""

from __future__ import annotations

import gc

_enabled = False


def enable() -> None:
    global _enabled
    _enabled = True


def settle() -> None:
    """Collect, then leave everything alive now out of later collections (when enabled)."""
    if _enabled:
        gc.collect()
        gc.freeze()
