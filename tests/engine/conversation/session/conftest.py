"""Session test helpers: a save whose file fails at a chosen write."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO

import pytest

from engine import localfile


class _FailingFile:
    """A file being written that raises ``error`` at its ``at``-th write (1-based)."""

    def __init__(self, f: BinaryIO, at: int, error: BaseException, calls: list[int]) -> None:
        self.f, self.at, self.error, self.calls = f, at, error, calls

    def write(self, chunk: bytes | memoryview) -> int:
        self.calls.append(len(memoryview(chunk)))
        if len(self.calls) == self.at:
            raise self.error
        return self.f.write(chunk)

    def __getattr__(self, name: str) -> object:
        return getattr(self.f, name)

    def __enter__(self) -> _FailingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()


@pytest.fixture
def fail_write(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, BaseException], list[int]]:
    """``fail_write(at, error)``: the next atomic write raises ``error`` at its ``at``-th write;
    returns the list that gets each write's length."""

    def arm(at: int, error: BaseException) -> list[int]:
        calls: list[int] = []
        real = os.fdopen
        monkeypatch.setattr(localfile.os, "fdopen",
                            lambda fd, mode: _FailingFile(real(fd, mode), at, error, calls))
        return calls

    return arm
