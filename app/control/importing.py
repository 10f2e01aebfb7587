"""Importing other apps' exports from the window (File → Import…, a drop): the import
(engine.conversation.importers) runs on a thread of its own (app.control.background) while the
window goes on; its figures come back for the progress bar, and at its end (or at a cancel) the
files it wrote join the conversation list where their dates put them. One line says how it
went; a record that could not be imported is named in it, and nothing imported before it is
lost (each conversation is committed on its own). QtCore only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject

from app.control import heap
from app.control.background import JobCancelled, JobFailed, LibraryJob, Notify, Report
from app.control.conversation import SUFFIX
from engine import paths
from engine.conversation.importers.run import ImportReport, Progress, import_files
from engine.conversation.library import Library
from engine.conversation.tree import Conversation

log = logging.getLogger(__name__)


def summary(report: ImportReport) -> tuple[str, str]:
    """The one line an import ends with, and its kind ("info" or "error")."""
    n = len(report.added)
    line = f"Imported {n} conversation{'' if n == 1 else 's'}"
    if report.updated:
        line += f", updated {len(report.updated)}"
    if report.skipped:
        line += f" ({report.skipped} already there)"
    if not report.n_failed:
        return line + ".", "info"
    more = f" (and {report.n_failed - 1} more)" if report.n_failed > 1 else ""
    return f"{line}; could not import {report.failed[0]}{more}", "error"


def progress_text(p: Progress) -> str:
    return (f"Importing {p.file.name}: {p.added + p.updated} imported, {p.skipped} already "
            f"there" + (f", {p.failed} failed" if p.failed else ""))


def _on_disk(folder: Path) -> dict[Path, tuple[float, Conversation]]:
    """Each conversation file of ``folder``: its last change (one stat each) and a conversation
    for the list, not read yet (made on the import's thread: 10,000 of them held the GUI's for
    about 0.4 s)."""
    found: dict[Path, tuple[float, Conversation]] = {}
    try:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.name.endswith(SUFFIX) and e.is_file():
                    path = Path(e.path)
                    str(path)  # (pathlib keeps it: the list's tooltips need not make it there)
                    found[path] = (e.stat().st_mtime, Conversation(path.stem, path))
    except OSError:
        return {}
    return found


class Importing(LibraryJob):
    """``start(files)`` imports them into ``folder`` (the conversations folder); ``progress``
    carries (share done from 0 to 1, a line), ``finished`` the ImportReport (None: cancelled
    or failed) once the list holds what it wrote."""

    def __init__(self, library: Library, notify: Notify, folder: Path | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__("import", notify, folder, parent)
        self.library = library

    def start(self, files: Sequence[Path]) -> bool:
        """Import ``files`` (exports: .json, .zip, .md); False while an import runs."""
        files = [Path(f) for f in files]
        folder = self.folder or paths.conversations_dir()
        if not files:
            return False
        if self.job.busy:
            self.notify("An import is under way: import these files when it ends.", "error")
            return False

        def job(report: Report) -> tuple[ImportReport, dict[Path, tuple[float, Conversation]]]:
            done = import_files(files, folder, progress=report)
            # the folder listed here, not on the GUI's thread, its entries out of collections
            return done, heap.settled(lambda: _on_disk(folder))

        self.progress.emit(0.0, f"Importing {files[0].name}…")
        return self.job.start(job)

    def _on_progress(self, p: object) -> None:
        if isinstance(p, Progress):
            share = p.done_bytes / p.total_bytes if p.total_bytes else 0.0
            self.progress.emit(min(share, 1.0), progress_text(p))

    def _on_done(self, result: object) -> None:
        if isinstance(result, tuple):
            report, files = result
            self.list_new(files)
            self.notify(*summary(report))
            self.finished.emit(report)
            return
        added = self.list_new()
        if isinstance(result, JobCancelled):
            self.notify(f"Import cancelled; the {added} conversations imported before are kept.",
                        "info")
        elif isinstance(result, JobFailed):
            self.notify(f"{result.line}; the {added} conversations imported before are kept.",
                        "error")
        self.finished.emit(None)

    def list_new(self, found: dict[Path, tuple[float, Conversation]] | None = None) -> int:
        """Add the conversations folder's files ``found`` (all of them, by their last change)
        that the list lacks: what the import wrote; their number."""
        if found is None:
            found = _on_disk(self.folder or paths.conversations_dir())
        known = {c.path for c in self.library.conversations if c.path is not None}
        when = {id(conv): t for path, (t, conv) in found.items() if path not in known}
        new = [conv for _, conv in found.values() if id(conv) in when]
        if new:  # by their last change; one without a file (or not in the folder) ranks first
            self.library.add_saved(new, lambda c: when.get(id(c), float("inf")))
        return len(new)
