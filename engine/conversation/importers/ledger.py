"""The import ledger: which conversation of which export went to which file of the
conversations folder (``.imports.sqlite3`` beside the files), so that importing the same export
again adds nothing, and a grown export can replace the file of its earlier import when nobody
changed that file since.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from engine.conversation.importers.base import Imported
from engine.conversation.session.format import SUFFIX, read_meta
from engine.conversation.session.meta import utc_now_iso
from engine.errors import SessionError

log = logging.getLogger(__name__)


class Ledger:
    """The keys imported into one folder: the file each went to, its source's format and id,
    and the file's size and mtime as written (SQLite). The files are the truth: a ledger that
    is missing, damaged or of another version is built again from their ``settings.import``, and
    a file renamed since (the window's Rename) is found again by the key it keeps there."""

    VERSION = 1

    def __init__(self, db: Path) -> None:
        self.db = db
        self.folder = db.parent
        self._followed = False  # renamed files looked for (once per import)
        try:
            self.conn = self._open()
        except sqlite3.DatabaseError as e:
            log.warning("rebuilding the import ledger %s: %s", db, e)
            for name in (db.name, db.name + "-wal", db.name + "-shm", db.name + "-journal"):
                db.with_name(name).unlink(missing_ok=True)
            self.conn = self._open()

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db, timeout=10.0)
        try:
            # a commit survives the process ending without an fsync of its own (WAL, NORMAL):
            # one per conversation costs nothing next to the file's own durable write
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            if conn.execute("PRAGMA user_version").fetchone()[0] != self.VERSION:
                with conn:
                    conn.execute("DROP TABLE IF EXISTS imported")
                    conn.execute("CREATE TABLE imported(key TEXT PRIMARY KEY, file TEXT NOT NULL, "
                                 "format TEXT NOT NULL, id TEXT, mtime_ns INTEGER, size INTEGER, "
                                 "at TEXT)")
                    self._rebuild(conn)
                    conn.execute(f"PRAGMA user_version = {self.VERSION}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _rebuild(self, conn: sqlite3.Connection) -> None:
        """The keys recorded in the folder's files (each file read once, its metadata only)."""
        for path in sorted(self.folder.glob("*" + SUFFIX)):
            try:
                st = os.stat(path)
                record = read_meta(path).settings.get("import")
            except (SessionError, OSError):
                continue
            if isinstance(record, dict) and isinstance(record.get("key"), str) and \
                    isinstance(record.get("format"), str):
                source_id = record.get("id") if isinstance(record.get("id"), str) else None
                conn.execute("INSERT OR REPLACE INTO imported VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (record["key"], path.name, record["format"], source_id,
                              st.st_mtime_ns, st.st_size, utc_now_iso()))

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    def has(self, key: str) -> bool:
        """Imported already, and its file is still there (a deleted one may come back)."""
        for _ in range(2):
            row = self.conn.execute("SELECT file FROM imported WHERE key = ?", (key,)).fetchone()
            if row is None:
                return False
            if (self.folder / row[0]).is_file() or not self._follow_renames():
                return (self.folder / row[0]).is_file()
        return False

    def untouched(self, imported: Imported) -> Path | None:
        """The file an earlier export of the same conversation (its format and id) went to,
        if nobody changed it since (continued, edited): it may take the newer export."""
        if imported.source_id is None:
            return None
        for _ in range(2):
            row = self.conn.execute(
                "SELECT file, mtime_ns, size FROM imported WHERE format = ? AND id = ? "
                "ORDER BY rowid DESC LIMIT 1", (imported.fmt, imported.source_id)).fetchone()
            if row is None:
                return None
            path = self.folder / row[0]
            try:
                st = os.stat(path)
            except OSError:
                if self._follow_renames():
                    continue
                return None
            return path if (st.st_mtime_ns, st.st_size) == (row[1], row[2]) else None
        return None

    def _follow_renames(self) -> bool:
        """Point the rows of files that are gone at the files they were renamed to, found by the
        import key each keeps in its settings (the files the ledger does not name are read, their
        metadata only, once per import). A rename changes neither a file's size nor its time, so
        the recorded ones stay: a renamed file is still "untouched" only if nothing else changed
        it. False when this was done already."""
        if self._followed:
            return False
        self._followed = True
        known = {row[0] for row in self.conn.execute("SELECT DISTINCT file FROM imported")}
        with self.conn:
            for path in sorted(self.folder.glob("*" + SUFFIX)):
                if path.name in known:
                    continue
                try:
                    record = read_meta(path).settings.get("import")
                except (SessionError, OSError):
                    continue
                key = record.get("key") if isinstance(record, dict) else None
                row = self.conn.execute("SELECT file FROM imported WHERE key = ?",
                                        (key,)).fetchone() if isinstance(key, str) else None
                if row is not None and not (self.folder / row[0]).is_file():
                    self.conn.execute("UPDATE imported SET file = ? WHERE file = ?",
                                      (path.name, row[0]))
        return True

    def add(self, key: str, path: Path, imported: Imported) -> None:
        st = os.stat(path)
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO imported VALUES (?, ?, ?, ?, ?, ?, ?)",
                              (key, path.name, imported.fmt, imported.source_id,
                               st.st_mtime_ns, st.st_size, utc_now_iso()))
