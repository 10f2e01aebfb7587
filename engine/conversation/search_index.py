"""Finding saved conversations by their text: an SQLite FTS5 index of every version of every
message (tool results and the names and arguments of tool calls included), so that a search
reads no ``.duet`` file. No Qt; not thread-safe (the app uses one from its search thread).

Each file is indexed with its size and modification time; a search first indexes again the
files that changed since (or were never indexed) and forgets the ones that are gone, so the
index cannot answer for a file as it was. A search finds what ``export.matches`` would find in
the opened conversation: ``query`` (case-insensitive, after ``str.casefold``) in the file's name
or in one of its texts. The texts are stored case-folded with the trigram tokenizer, which
finds any substring of three characters or more; a shorter query scans the stored texts.

The index is a cache (``cache_dir()/search.sqlite3``): a damaged one is deleted and built
again; one that cannot be used at all (an unwritable folder, another process holding a lock)
leaves the search to read the files themselves, on the same thread.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from engine import paths
from engine.conversation.session import format as session_format
from engine.errors import SessionError

log = logging.getLogger(__name__)
T = TypeVar("T")

VERSION = 1
FILENAME = "search.sqlite3"
SLOT = 1 << 20  # the rowids of a file's texts are file id * SLOT + i (a file holds fewer)
_TRIGRAM = 3
_SCHEMA = (
    "CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, "
    "mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL)",
    "CREATE VIRTUAL TABLE texts USING fts5(body, tokenize='trigram case_sensitive 1')",
    f"PRAGMA user_version = {VERSION}",
)
_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_IOERR",
         "SQLITE_FULL")  # errors of the moment or of the place, not damage to the index


def default_path() -> Path:
    return paths.cache_dir() / FILENAME


def saved_texts(path: Path) -> list[str]:
    """Every text of the conversation saved at ``path``: its messages and every version in its
    tree (tool results, and tool calls' names and arguments, as export.turn_texts), each once.
    Raises SessionError or OSError."""
    meta = session_format.read_meta(path)
    texts: list[Any] = []
    for m in meta.messages:
        texts.append(m.content)
        texts += [s for c in m.tool_calls for s in (c.name, c.arguments)]
        texts += [s for a in m.attachments for s in (a.name, a.text)]
    tree = meta.settings.get("tree")
    if isinstance(tree, dict) and isinstance(tree.get("nodes"), list):
        for n in tree["nodes"]:
            if not isinstance(n, dict):
                continue
            texts.append(n.get("text"))
            calls = n.get("tool_calls")
            if isinstance(calls, list):
                texts += [c.get(key) for c in calls if isinstance(c, dict)
                          for key in ("name", "arguments")]
            files = n.get("attachments")
            if isinstance(files, list):
                texts += [a.get(key) for a in files if isinstance(a, dict) for key in ("name", "text")]
    return list(dict.fromkeys(t for t in texts if isinstance(t, str)))


def scan(query: str, files: Sequence[Path]) -> list[Path]:
    """The ``files`` whose name or text holds ``query``, read one by one (no index)."""
    q = query.casefold().strip()
    return [p for p in files if not q or q in p.stem.casefold() or
            any(q in t.casefold() for t in _texts_or_none(p))]


def _texts_or_none(path: Path) -> list[str]:
    try:
        return saved_texts(path)
    except (SessionError, OSError) as e:
        log.info("not searching %s: %s", path.name, e)
        return []


class SearchIndex:
    def __init__(self, db: Path | None = None) -> None:
        self.db = db or default_path()
        self._conn: sqlite3.Connection | None = None
        self._inode: tuple[int, int] | None = None  # (device, inode) of the file opened

    # -- the questions -------------------------------------------------------------------
    def search(self, query: str, files: Sequence[Path]) -> list[Path]:
        """The ``files`` whose name or any text (every version) holds ``query``, in order."""
        q = query.casefold().strip()
        if not q:
            return list(files)
        by_name = {p for p in files if q in p.stem.casefold()}
        rest = [p for p in files if p not in by_name]
        try:
            found = self._guarded(lambda conn: self._search(conn, q, rest))
        except (sqlite3.Error, OSError) as e:
            log.warning("the search index %s cannot be used (%s); reading the files", self.db, e)
            found = set(scan(query, rest))
        return [p for p in files if p in by_name or p in found]

    def update(self, path: Path) -> None:
        """Index ``path`` again now (a conversation was saved)."""
        self._quietly(lambda conn: self._refresh(conn, [path], force=True))

    def update_many(self, files: Sequence[Path]) -> None:
        """Index ``files`` again now, in one transaction (an import's new conversations)."""
        def index(conn: sqlite3.Connection) -> None:
            with conn:
                for path in files:
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue
                    self._index_rows(conn, path, st)

        if files:
            self._quietly(index)

    def forget(self, path: Path) -> None:
        """Drop ``path`` from the index (a conversation was deleted)."""
        self._quietly(lambda conn: self._forget(conn, str(path)))

    def moved(self, old: Path, new: Path) -> None:
        """``old`` is now ``new`` (a conversation was renamed)."""
        def move(conn: sqlite3.Connection) -> None:
            self._forget(conn, str(old))
            self._refresh(conn, [new], force=True)

        self._quietly(move)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the work ------------------------------------------------------------------------
    def _search(self, conn: sqlite3.Connection, q: str, files: Sequence[Path]) -> set[Path]:
        ids = self._refresh(conn, files)
        if len(q) >= _TRIGRAM:
            rows = conn.execute("SELECT DISTINCT rowid / ? FROM texts WHERE texts MATCH ?",
                                (SLOT, '"' + q.replace('"', '""') + '"'))
        else:
            rows = conn.execute("SELECT DISTINCT rowid / ? FROM texts WHERE instr(body, ?) > 0",
                                (SLOT, q))
        hit = {row[0] for row in rows}
        return {p for p in files if ids.get(p) in hit}

    def _refresh(self, conn: sqlite3.Connection, files: Sequence[Path], *,
                 force: bool = False) -> dict[Path, int]:
        """Index again the ``files`` that changed (all of them when ``force``), forget the
        ones that are gone; returns the file ids of the others."""
        known = {path: (fid, mtime, size) for fid, path, mtime, size in
                 conn.execute("SELECT id, path, mtime_ns, size FROM files")}
        ids: dict[Path, int] = {}
        for path in files:
            try:
                st = os.stat(path)
            except OSError:
                self._forget(conn, str(path))
                continue
            row = known.get(str(path))
            if row is not None and not force and row[1:] == (st.st_mtime_ns, st.st_size):
                ids[path] = row[0]
            else:
                ids[path] = self._index(conn, path, st)
        return ids

    def _index(self, conn: sqlite3.Connection, path: Path, st: os.stat_result) -> int:
        with conn:
            return self._index_rows(conn, path, st)

    def _index_rows(self, conn: sqlite3.Connection, path: Path, st: os.stat_result) -> int:
        """Index ``path`` within the caller's transaction; its file id."""
        texts = [t.casefold() for t in _texts_or_none(path)][:SLOT]
        conn.execute("INSERT INTO files(path, mtime_ns, size) VALUES (?, ?, ?) "
                     "ON CONFLICT(path) DO UPDATE SET mtime_ns = excluded.mtime_ns, "
                     "size = excluded.size", (str(path), st.st_mtime_ns, st.st_size))
        fid = conn.execute("SELECT id FROM files WHERE path = ?", (str(path),)).fetchone()[0]
        conn.execute("DELETE FROM texts WHERE rowid >= ? AND rowid < ?",
                     (fid * SLOT, (fid + 1) * SLOT))
        conn.executemany("INSERT INTO texts(rowid, body) VALUES (?, ?)",
                         ((fid * SLOT + i, t) for i, t in enumerate(texts)))
        return fid

    def _forget(self, conn: sqlite3.Connection, path: str) -> None:
        with conn:
            row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
            if row is not None:
                conn.execute("DELETE FROM texts WHERE rowid >= ? AND rowid < ?",
                             (row[0] * SLOT, (row[0] + 1) * SLOT))
                conn.execute("DELETE FROM files WHERE id = ?", row)

    # -- the database --------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self.db.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.db, timeout=5.0)
            try:
                check = conn.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    raise sqlite3.DatabaseError(check)
                if not self._make_schema(conn):
                    conn.close()
                    log.info("rebuilding the search index %s: another version made it", self.db)
                    self._delete()
                    conn = sqlite3.connect(self.db, timeout=5.0)
                    self._make_schema(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._inode = self._file_id()
        return self._conn

    def _file_id(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.db)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _moved(self) -> bool:
        """Whether the file at the index's path is no longer the one this connection has open
        (SQLite says "readonly database": its own error code is lost through FTS5)."""
        return self._conn is not None and self._file_id() != self._inode

    @staticmethod
    def _make_schema(conn: sqlite3.Connection) -> bool:
        """Make the tables of an empty index, under the write lock: another connection making
        them at the same moment (the window's search and an import) waits, then finds them
        made, never half made. False: the file holds another version's index."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] != VERSION:
                if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                    conn.rollback()
                    return False
                for statement in _SCHEMA:
                    conn.execute(statement)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        return True

    def _guarded(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(connection)``; a damaged index is deleted, built again and asked once more."""
        try:
            return work(self._connection())
        except sqlite3.DatabaseError as e:
            if getattr(e, "sqlite_errorname", "").startswith("SQLITE_READONLY") and self._moved():
                self.close()  # another connection rebuilt the file under this one: open it anew
                return work(self._connection())
            if getattr(e, "sqlite_errorname", "").startswith(_BUSY):
                raise
            self.close()
            log.warning("rebuilding the search index %s: it is damaged (%s)", self.db, e)
            self._delete()
            return work(self._connection())

    def _quietly(self, work: Callable[[sqlite3.Connection], object]) -> None:
        try:
            self._guarded(work)
        except (sqlite3.Error, OSError) as e:
            log.warning("the search index %s was not updated: %s", self.db, e)

    def _delete(self) -> None:
        for name in (self.db.name, self.db.name + "-journal", self.db.name + "-wal",
                     self.db.name + "-shm"):
            self.db.with_name(name).unlink(missing_ok=True)
