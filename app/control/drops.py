"""Where the files dropped on the window go: a conversation file opens, the first model
(a ``.gguf``) becomes the target and loads, another app's export (a ``.zip``, a
``conversations.json``) is imported, anything else is attached to the message being written.
(Dropped on the conversation list, every file is imported: app.views.sidebar.) Pure Python."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from app.control.conversation import SUFFIX

MODEL_SUFFIX = ".gguf"
EXPORT_SUFFIX = ".zip"
EXPORT_NAME = "conversations.json"  # ChatGPT's and Claude's name for theirs


@dataclass(frozen=True)
class Dropped:
    conversations: tuple[Path, ...] = ()
    model: Path | None = None  # the first model dropped (one target at a time)
    attached: tuple[Path, ...] = ()
    imported: tuple[Path, ...] = ()


def sort_drop(paths: Iterable[Path]) -> Dropped:
    """The dropped local files, sorted by where each goes (module docstring)."""
    conversations: list[Path] = []
    models: list[Path] = []
    attached: list[Path] = []
    imported: list[Path] = []
    for path in map(Path, paths):
        if path.suffix.lower() == EXPORT_SUFFIX or path.name.lower() == EXPORT_NAME:
            imported.append(path)
        elif path.suffix == SUFFIX:
            conversations.append(path)
        elif path.suffix.lower() == MODEL_SUFFIX:
            models.append(path)
        else:
            attached.append(path)
    return Dropped(tuple(conversations), models[0] if models else None, tuple(attached),
                   tuple(imported))
