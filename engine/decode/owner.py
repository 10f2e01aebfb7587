"""The thread that owns what it guards: a debug check, on when ``DUET_CHECK_OWNER=1`` (the test
suite sets it), that each entry point is called on that thread.

The engine's scheduler belongs to one thread: the caller's, for a runtime driven where it is
built (``Runtime.generator``), or the engine thread's once it is handed over
(engine.runtime.service claims it as its thread starts). Other threads post jobs and calls to
that thread and read what it publishes; an entry point called from another thread is a bug,
which the check turns into an AssertionError at the call instead of a corrupted batch later.
"""

from __future__ import annotations

import os
import threading


def checking() -> bool:
    """Whether owner checks are on (read at each check: tests may set it late)."""
    return os.environ.get("DUET_CHECK_OWNER") == "1"


class Owner:
    """The owning thread of one object: the first that ``check`` sees, or the one that
    ``claim`` names."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._thread: threading.Thread | None = None

    def claim(self) -> None:
        """The calling thread owns it from now on (a hand-over)."""
        self._thread = threading.current_thread()

    def check(self) -> None:
        if not checking():
            return
        here = threading.current_thread()
        if self._thread is None:
            self._thread = here
        assert self._thread is here, (f"{self.what} is owned by the thread {self._thread.name}, "
                                      f"not {here.name}")
