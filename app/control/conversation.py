"""Conversations on disk: file names, the saved ones, the recent files.

The conversation itself (a tree of message versions) is ``engine.conversation``'s, re-exported
here: editing or regenerating adds a version, and the engine finds the longest common prefix
with its cache and recomputes only the changed tail.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path

from engine import paths
from engine.conversation.tree import Conversation, Turn, title_from
from engine.localfile import read_json, write_json

__all__ = ["Conversation", "Turn", "title_from", "RecentFiles", "safe_name", "saved_conversations",
           "unique_path"]

log = logging.getLogger(__name__)

SUFFIX = ".duet"
MAX_RECENT = 10


# -- files ------------------------------------------------------------------------------------
_UNSAFE = re.compile(r'[\\/:*?"<>|\x00-\x1f]+')


def safe_name(title: str) -> str:
    """A file stem for ``title`` (no path separators or characters Windows refuses)."""
    name = _UNSAFE.sub(" ", title).strip(" .")
    return " ".join(name.split())[:80] or "conversation"


def unique_path(folder: Path, title: str, *, keep: Path | None = None,
                taken: Iterable[Path] = ()) -> Path:
    """``folder/<title>.duet``, or ``<title> (2).duet``… if that file exists or is in ``taken``
    (paths promised to files not written yet); ``keep`` counts as free."""
    stem = safe_name(title)
    taken = set(taken)
    path = folder / (stem + SUFFIX)
    n = 2
    while (path.exists() or path in taken) and path != keep:
        path = folder / f"{stem} ({n}){SUFFIX}"
        n += 1
    return path


def saved_conversations(folder: Path | None = None) -> list[Path]:
    """The ``.duet`` files in the conversations folder, most recently changed first."""
    folder = folder or paths.conversations_dir()
    try:
        files = [p for p in folder.iterdir() if p.suffix == SUFFIX and p.is_file()]
    except OSError:
        return []
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)


def _check_recent(data: object) -> None:
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ValueError("it has no list of files")


class RecentFiles:
    """The last opened or saved conversation files, in ``config_dir()/recent.json``."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or paths.config_dir() / "recent.json"
        self.items: list[Path] = self._read()

    def add(self, file: Path) -> None:
        file = Path(file).resolve()
        self.items = [file] + [p for p in self.items if p != file][:MAX_RECENT - 1]
        self._write()

    def remove(self, file: Path) -> None:
        file = Path(file).resolve()
        if file in self.items:
            self.items.remove(file)
            self._write()

    def _read(self) -> list[Path]:
        data = read_json(self.path, _check_recent)  # a damaged file is kept as recent.json.bad
        if data is None:
            return []
        return [Path(p) for p in data["files"] if isinstance(p, str) and "\0" not in p][:MAX_RECENT]

    def _write(self) -> None:
        try:
            write_json(self.path, {"version": 1, "files": [str(p) for p in self.items]})
        except (OSError, ValueError) as e:
            log.warning("cannot save the recent files list: %s", e)
