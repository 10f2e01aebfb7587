"""Where the files dropped on the window go: a conversation file opens, the first model
(a ``.gguf``) becomes the target and loads, anything else is attached to the message being
written. Pure Python."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from app.control.conversation import SUFFIX

MODEL_SUFFIX = ".gguf"


@dataclass(frozen=True)
class Dropped:
    conversations: tuple[Path, ...] = ()
    model: Path | None = None  # the first model dropped (one target at a time)
    attached: tuple[Path, ...] = ()


def sort_drop(paths: Iterable[Path]) -> Dropped:
    """The dropped local files, sorted by where each goes (module docstring)."""
    conversations: list[Path] = []
    models: list[Path] = []
    attached: list[Path] = []
    for path in map(Path, paths):
        if path.suffix == SUFFIX:
            conversations.append(path)
        elif path.suffix.lower() == MODEL_SUFFIX:
            models.append(path)
        else:
            attached.append(path)
    return Dropped(tuple(conversations), models[0] if models else None, tuple(attached))
