"""Lifetime of objects that own a llama.cpp handle: ``close()`` once, also via ``with`` or GC."""

from __future__ import annotations

from typing import Self


class NativeOwner:
    """Subclasses implement ``close()`` idempotently."""

    def close(self) -> None:  # pragma: no cover - always overridden
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
