"""A conversation as the GUI holds it: turns with their drafted spans, and its file.

Pure Python (no Qt). The engine sees a conversation as ``engine_messages()``: a tuple of
``engine.chat.Message``. Regenerating drops a reply and everything after it; editing drops a
user message and everything after it and appends the edited one: in both cases the engine
finds the longest common prefix with its cache and recomputes only the changed tail.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from engine import paths
from engine.localfile import read_json, write_json
from engine.chat import Message
from engine.events import Done, Stats, Token

from app.markdown import add_span

log = logging.getLogger(__name__)

SUFFIX = ".duet"
MAX_RECENT = 10
TITLE_CHARS = 48


@dataclass
class Turn:
    """One message. ``spans``: character ranges of ``text`` that came from the drafter."""

    role: str
    text: str
    spans: list[tuple[int, int]] = field(default_factory=list)
    stats: Stats | None = None
    reason: str | None = None  # how an assistant reply ended (stop, length, cancelled…)
    streaming: bool = False
    time: float = field(default_factory=time.time)  # when it was written (epoch seconds)

    def message(self) -> Message:
        return Message(self.role, self.text, self.time)


class Conversation:
    def __init__(self, title: str = "New conversation", path: Path | None = None,
                 turns: Iterable[Turn] = ()) -> None:
        self.id = uuid.uuid4().hex
        self.title = title
        self.path = path
        self.turns: list[Turn] = list(turns)
        self.loaded = path is None  # a saved conversation is read on first open
        self.dirty = False

    # -- the engine's view -----------------------------------------------------------------
    def engine_messages(self, upto: int | None = None) -> tuple[Message, ...]:
        """The finished turns before ``upto`` (all by default), as engine messages."""
        turns = self.turns if upto is None else self.turns[:upto]
        return tuple(t.message() for t in turns if not t.streaming)

    # -- edits -----------------------------------------------------------------------------
    def add_user(self, text: str, system_prompt: str = "") -> Turn:
        if not self.turns and system_prompt.strip():
            self.turns.append(Turn("system", system_prompt.strip()))
        if not any(t.role == "user" for t in self.turns) and self.title == "New conversation":
            self.title = title_from(text)
        turn = Turn("user", text)
        self.turns.append(turn)
        self.dirty = True
        return turn

    def begin_reply(self) -> Turn:
        turn = Turn("assistant", "", streaming=True)
        self.turns.append(turn)
        return turn

    @property
    def streaming(self) -> Turn | None:
        return self.turns[-1] if self.turns and self.turns[-1].streaming else None

    def append_tokens(self, tokens: Sequence[Token]) -> None:
        turn = self.streaming
        if turn is None:
            return
        parts = []
        pos = len(turn.text)
        for tok in tokens:
            if tok.from_draft:
                add_span(turn.spans, pos, pos + len(tok.text))
            parts.append(tok.text)
            pos += len(tok.text)
        turn.text += "".join(parts)

    def finish_reply(self, done: Done) -> Turn | None:
        """End the streaming reply with ``done`` (its text is authoritative: it holds the tail)."""
        turn = self.streaming
        if turn is None:
            return None
        turn.text = done.text
        turn.spans = [(a, min(b, len(done.text))) for a, b in turn.spans if a < len(done.text)]
        turn.stats, turn.reason, turn.streaming = done.stats, done.reason, False
        turn.time = time.time()
        self.dirty = True
        return turn

    def abort_reply(self) -> None:
        """Drop a reply that failed before producing anything; keep partial text otherwise."""
        turn = self.streaming
        if turn is None:
            return
        if turn.text:
            turn.streaming, turn.reason = False, "error"
        else:
            self.turns.pop()

    def truncate(self, index: int) -> None:
        """Drop turn ``index`` and everything after it."""
        del self.turns[index:]
        self.dirty = True

    def set_messages(self, messages: Sequence[Message]) -> None:
        self.turns = [Turn(m.role, m.content, time=m.time) for m in messages]
        self.loaded = True
        self.dirty = False


def title_from(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1].rstrip() + "…"


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
