"""Coalescing of rapid updates: collect items, hand them out at most once per interval.

The worker feeds every Token into a ``Coalescer`` and emits whatever ``add`` returns, so the GUI
gets few batches per second however fast tokens come; ``flush`` returns the rest before the
reply's ``finished``. A step boundary (``add(..., boundary=True)``: the last token of a target
pass) hands out what is held unless the next step is expected within the interval, so a
speculative burst reaches the window as soon as its pass is verified, not one pass later.
Pure logic (no Qt, no threads); the clock is injectable.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL_S = 1 / 30


class Coalescer(Generic[T]):
    """``add`` returns a batch when at least ``interval`` seconds passed since the last one, or
    at a step boundary when the step took at least ``interval`` (the next one will likely take
    as long, so holding the items would delay them by a whole step).

    The first item after a quiet period is handed out at once (no added latency for slow
    streams); items that come faster wait for the next due batch, boundary or ``flush``.
    """

    def __init__(self, interval: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if interval < 0:
            raise ValueError("interval must be >= 0")
        self.interval = interval
        self._clock = clock
        self._items: list[T] = []
        self._last = float("-inf")  # when the last batch was handed out
        self._step = float("-inf")  # when the last step ended

    def add(self, item: T, *, boundary: bool = False) -> list[T] | None:
        self._items.append(item)
        now = self._clock()
        slow_step = boundary and now - self._step >= self.interval
        if boundary:
            self._step = now
        if now - self._last >= self.interval or slow_step:
            self._last = now
            return self._take()
        return None

    def flush(self) -> list[T] | None:
        """Everything not handed out yet (None when empty)."""
        return self._take() if self._items else None

    def __len__(self) -> int:
        return len(self._items)

    def _take(self) -> list[T]:
        items, self._items = self._items, []
        return items
