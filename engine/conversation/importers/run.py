"""The import: each conversation of each file written as a ``.duet`` file in the conversations
folder, as the window saves one (its messages, ``settings.title`` and ``settings.tree`` with
every version), text only: no KV state is computed here, the history is read the first time
the conversation is continued. The file's mtime is the conversation's last change, so the
window lists it among the others in the order it was last used.

Idempotent: each conversation's key (registry.key_of) is recorded in the file
(``settings.import``) and in a small ledger beside the files (``.imports.sqlite3``); a key
whose file still exists is not imported again, nor a conversation of Duet's own export of
everything whose file is still in the folder holding all of it. A conversation exported again after it grew (the
same format and id, another key) replaces the file of its earlier import when nobody changed
that file since (its size and mtime as the ledger has them) and the new export holds every
message of it; otherwise it comes in beside it: what was continued or edited in Duet, or what a
later export lacks, is never overwritten. Each conversation is committed on its own (the
file, then its ledger row), so a bad record, a failure or an interruption loses nothing already
imported. The files written go into the search index as the import goes (a batch at least
every second, and the rest when a file ends), as a save puts its file there.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine import paths
from engine.conversation.importers.base import Imported, ImportFailure
from engine.conversation.importers.ledger import Ledger
from engine.conversation.importers.records import Records
from engine.conversation.importers.registry import LABELS, read_record
from engine.conversation.projects import Project, Projects, clean_name
from engine.conversation.search_index import SearchIndex
from engine.conversation.session import store
from engine.conversation.session.format import SUFFIX, read_meta, write_session
from engine.conversation.session.meta import ModelInfo, SessionMeta, utc_now_iso
from engine.conversation.store import tree_from_json, tree_to_json
from engine.conversation.tree import NEW_TITLE, Conversation, Node, title_from
from engine.errors import SessionError

log = logging.getLogger(__name__)

LEDGER = ".imports.sqlite3"
INDEX_EVERY_S = 1.0  # new files go into the search index together, at least this often
_UNSAFE = re.compile(r'[\\/:*?"<>|\x00-\x1f]+')


@dataclass(frozen=True)
class Progress:
    """Where an import stands: the file being read, its bytes read and in all, and the counts."""

    file: Path
    done_bytes: int
    total_bytes: int
    added: int
    updated: int
    skipped: int
    failed: int


@dataclass
class ImportReport:
    """``added``: the files written; ``updated``: the files an earlier export of the same
    conversation went to, untouched since, that took the newer export; ``skipped``:
    conversations already imported; ``failed``: one line for each record or file that could
    not be imported (the first MAX_LINES of them: ``n_failed`` counts them all)."""

    MAX_LINES = 1000

    added: list[Path] = field(default_factory=list)
    updated: list[Path] = field(default_factory=list)
    skipped: int = 0
    failed: list[str] = field(default_factory=list)
    n_failed: int = 0

    def fail(self, line: str) -> None:
        self.n_failed += 1
        if len(self.failed) < self.MAX_LINES:
            self.failed.append(line)


def import_files(files: Sequence[Path], folder: Path | None = None, *,
                 progress: Callable[[Progress], None] | None = None,
                 index: SearchIndex | None = None) -> ImportReport:
    """Import every conversation in ``files`` into ``folder`` (the conversations folder by
    default); ``progress`` is called after each record. Never raises for a bad file or record:
    each is one line in the report's ``failed``."""
    folder = Path(folder) if folder is not None else paths.conversations_dir()
    folder.mkdir(parents=True, exist_ok=True)
    report = ImportReport()
    own_index = index is None
    index = index or SearchIndex()
    joined: dict[str, list[Path]] = {}  # project → the files written for it
    described: dict[str, Project] = {}  # the projects Duet's exports describe, by name
    try:
        with Ledger(folder / LEDGER) as ledger:
            for path in files:
                _import_file(Path(path), folder, ledger, index, report, progress, joined,
                             described)
    finally:
        if own_index:
            index.close()
        _join_projects(folder, joined, described, report)
    return report


def _join_projects(folder: Path, joined: dict[str, list[Path]], described: dict[str, Project],
                   report: ImportReport) -> None:
    """Conversations of Duet's export of everything go back into their projects; a project the
    folder has none of by that name is made anew, with the system prompt, preset and files the
    export gives it (one already there keeps its own)."""
    if not joined and not described:
        return
    try:
        projects = Projects(folder)
        have = {name.casefold(): name for name in projects.projects}  # (names are unique in any case)
        for name in map(clean_name, [*described, *joined]):
            if name and name.casefold() not in have:
                have[name.casefold()] = name = projects.add(name).name
                told = described.get(name)
                if told is not None:
                    projects.set_prompt(name, told.system_prompt)
                    projects.set_preset(name, told.preset or None)
                    try:
                        projects.add_files(name, told.files)
                    except ValueError as e:  # a file too large to keep with a project
                        report.fail(f"the files of project {name}: {e}")
        for name, written in joined.items():
            if clean_name(name).casefold() in have:
                projects.move(written, have[clean_name(name).casefold()])
    except OSError as e:
        report.fail(f"the projects of the imported conversations: {e.strerror or e}")


def _import_file(path: Path, folder: Path, ledger: Ledger, index: SearchIndex,
                 report: ImportReport, progress: Callable[[Progress], None] | None,
                 joined: dict[str, list[Path]], described: dict[str, Project]) -> None:
    records = Records(path)
    pending: list[Path] = []  # written, not yet in the search index
    flushed = time.monotonic()
    try:
        for i, record in records:
            try:
                if isinstance(record, ImportFailure):
                    raise record
                imported, key = read_record(record)
                if ledger.has(key) or already_saved(folder, imported):
                    report.skipped += 1
                else:
                    older = ledger.untouched(imported)
                    if older is not None and not extends(imported.root, older):
                        older = None  # not the same conversation grown: it comes in beside
                    written = save_imported(folder, imported, key, source=path, into=older)
                    ledger.add(key, written, imported)
                    pending.append(written)
                    (report.updated if older else report.added).append(written)
                    if imported.project:
                        joined.setdefault(imported.project, []).append(written)
            except (ImportFailure, SessionError) as e:
                report.fail(f"{path.name}: record {i}{_name(record)}: {e}")
            except Exception as e:  # a record no reader foresaw must not end the import
                log.exception("importing record %d of %s", i, path)
                report.fail(f"{path.name}: record {i}{_name(record)}: unexpected "
                                     f"content ({type(e).__name__}: {e})"[:400])
            if pending and time.monotonic() - flushed >= INDEX_EVERY_S:
                index.update_many(pending)
                pending, flushed = [], time.monotonic()
            if progress is not None:
                progress(Progress(path, records.done, records.total, len(report.added),
                                  len(report.updated), report.skipped, report.n_failed))
    except ImportFailure as e:  # the file itself: unreadable, or its list broken
        report.fail(f"{path.name}: {e}")
    finally:
        index.update_many(pending)
    described.update({p.name: p for p in records.projects})


def signatures(root: Node) -> set[int]:
    """One number for each message of a tree: its text, role and tool fields and those of
    every message before it (not its time), so that a tree holds another when it holds all of
    the other's numbers."""
    out: set[int] = set()
    stack = [(c, 0) for c in root.children]
    while stack:
        node, up = stack.pop()
        sig = hash((up, node.turn.message()))
        out.add(sig)
        stack.extend((c, sig) for c in node.children)
    return out


def _saved_tree(path: Path) -> Node | None:
    try:
        meta = read_meta(path)
    except SessionError:
        return None
    messages = [store.from_saved(m) for m in meta.messages]
    return tree_from_json(meta.settings.get("tree"), messages)


def extends(root: Node, path: Path) -> bool:
    """Whether the tree ``root`` holds every message, every version, of the conversation
    saved at ``path`` (so that writing it there loses nothing)."""
    old = _saved_tree(path)
    return old is not None and signatures(old) <= signatures(root)


def already_saved(folder: Path, imported: Imported) -> bool:
    """A conversation of Duet's own export whose file is in ``folder`` holding every message of
    it: an export of everything imported back into the library it came from adds nothing."""
    if imported.fmt != "duet" or not imported.source_id:
        return False
    path = folder / Path(imported.source_id).name
    if path.suffix != SUFFIX or not path.is_file():
        return False
    old = _saved_tree(path)
    return old is not None and signatures(imported.root) <= signatures(old)


def _name(record: Any) -> str:
    """`` ("title")`` of a record, for a line about it, when it has one."""
    if isinstance(record, dict):
        for key in ("title", "name"):
            if isinstance(record.get(key), str) and record[key].strip():
                return f' ("{" ".join(record[key].split())[:60]}")'
        if isinstance(record.get("conv"), dict):
            return _name(record["conv"])
    return ""


def file_for(folder: Path, title: str) -> Path:
    """``folder/<title>.duet``, or ``<title> (2).duet``… as the window names a new
    conversation's file (app.control.conversation.unique_path)."""
    title = title.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate names no file
    stem = " ".join(_UNSAFE.sub(" ", title).strip(" .").split())[:80] or "conversation"
    path, n = folder / (stem + SUFFIX), 2
    while path.exists():
        path, n = folder / f"{stem} ({n}){SUFFIX}", n + 1
    return path


def _title(imported: Imported) -> str:
    """The export's title; for an untitled one, the window's title for a new chat: its first
    question's opening words."""
    if imported.title.strip() and imported.title != NEW_TITLE:
        return " ".join(imported.title.split())
    first: str | None = None
    node = imported.root.current
    while node is not None and first is None:
        first = node.turn.text if node.turn.role == "user" and node.turn.text.strip() else None
        node = node.current
    return title_from(first) if first else NEW_TITLE


def _fill_times(root: Node, default: float) -> None:
    """A message the export gives no time takes the one before it (the first: ``default``)."""
    stack = [(c, default) for c in root.children]
    while stack:
        node, before = stack.pop()
        if not node.turn.time:
            node.turn.time = before
        stack.extend((c, node.turn.time) for c in node.children)


def _iso(t: float) -> str:
    try:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return utc_now_iso()


def save_imported(folder: Path, imported: Imported, key: str, *, source: Path,
                  into: Path | None = None) -> Path:
    """Write ``imported`` as a new ``.duet`` file in ``folder`` (text only), or over ``into``
    (the same conversation from an earlier export); its path. Raises SessionError when it
    cannot be saved (too large for a ``.duet`` file, disk errors)."""
    _fill_times(imported.root, imported.created)
    conv = Conversation(_title(imported))
    conv.set_root(imported.root)
    messages = conv.engine_messages()
    label = LABELS[imported.fmt]
    model = imported.model or label
    settings = {"title": conv.title, "tree": tree_to_json(conv),
                "import": {"key": key, "format": imported.fmt, "id": imported.source_id,
                           "file": source.name, "model": imported.model, "at": utc_now_iso()}}
    meta = SessionMeta(created=_iso(imported.created), saved=utc_now_iso(),
                       messages=tuple(store.to_saved(m) for m in messages),
                       target=ModelInfo(path=model, display_name=f"{model} ({label})", size=0,
                                        fingerprint="unknown"),
                       settings=settings)
    path = into or file_for(folder, conv.title)
    try:
        write_session(path, meta, {})
    except OSError as e:
        raise SessionError(f"cannot write {path.name}: {e.strerror or e}") from None
    when = imported.updated or imported.created
    if when > 0:
        try:
            os.utime(path, (time.time(), when))
        except (OSError, OverflowError, ValueError):
            pass
    return path
