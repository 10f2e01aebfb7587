"""The window's loaded models: the one in use and those used before it, kept loaded so that
going back to a conversation's model switches to it at once instead of loading it again.

A ``Shelf`` holds each model under a key (its file), with the memory it is estimated to need
(engine.models.served.memory_needed: from its GGUF header, before it loads). Making room for
one more takes out the least recently used ones until the estimates fit the budget and the
count; the caller closes what was taken out, before loading. The budget follows the model
server's (engine.runtime.fleet): its share of the memory available, counted with what the shelf
already holds. Nothing here imports llama.cpp.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from engine.runtime.fleet import BUDGET_SHARE, MAX_LOADED

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


@dataclass
class _Kept(Generic[T]):
    value: T
    need: int


class Shelf(Generic[K, T]):
    """Loaded models by key, most recently used last (see the module's docstring)."""

    def __init__(self, max_kept: int = MAX_LOADED) -> None:
        if max_kept < 1:
            raise ValueError("max_kept must be >= 1")
        self.max_kept = max_kept
        self._kept: dict[K, _Kept[T]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: object) -> bool:
        return key in self._kept

    @property
    def used(self) -> int:
        """Bytes the kept models are estimated to need."""
        return sum(k.need for k in self._kept.values())

    def values(self) -> list[T]:
        """The kept models, most recently used first."""
        # (a copy first: the local server asks from the GUI thread while the worker may change it)
        return [k.value for k in reversed(list(self._kept.values()))]

    def take(self, key: K) -> T | None:
        """The model kept under ``key``, now the most recently used (None: not kept)."""
        kept = self._kept.pop(key, None)
        if kept is None:
            return None
        self._kept[key] = kept
        return kept.value

    def remove(self, key: K) -> T | None:
        kept = self._kept.pop(key, None)
        return kept.value if kept is not None else None

    def room_for(self, need: int, available: int) -> list[T]:
        """Take out the least recently used models until one more needing ``need`` bytes fits
        ``BUDGET_SHARE`` of ``available`` (the memory free now) plus what the shelf holds, and
        the count; those taken out, for the caller to close before it loads. All of them go
        when even an empty shelf is too small: the new model is tried anyway, as a single
        load always was."""
        budget = self.used + int(BUDGET_SHARE * available)
        gone: list[T] = []
        while self._kept and (self.used + need > budget or len(self._kept) + 1 > self.max_kept):
            key = next(iter(self._kept))
            gone.append(self._kept.pop(key).value)
        return gone

    def trim(self) -> list[T]:
        """Take out the least recently used models past the count (``max_kept`` lowered)."""
        gone: list[T] = []
        while len(self._kept) > self.max_kept:
            gone.append(self._kept.pop(next(iter(self._kept))).value)
        return gone

    def put(self, key: K, value: T, need: int) -> None:
        """Keep ``value`` under ``key`` as the most recently used (after ``room_for``)."""
        self._kept.pop(key, None)
        self._kept[key] = _Kept(value, need)

    def clear(self) -> list[T]:
        """Take out every model (to close); the shelf is empty."""
        gone = self.values()
        self._kept = {}
        return gone
