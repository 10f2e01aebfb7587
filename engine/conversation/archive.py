"""Everything in one zip: each saved conversation as Markdown (the branch shown, to read) and as
JSON (every version, engine.conversation.export.to_json), with ``manifest.json`` listing them
and the projects (each conversation's project is named in its entry and its JSON; each project
has its system prompt, preset and files, the files' text in ``project-files/``).
Duet's import reads it back (engine.conversation.importers.records: a zip with this manifest).
No Qt.

The zip is written beside its destination under a temporary name and renamed over it at the
end: an export that fails or is cancelled leaves no half zip. A conversation whose file cannot
be read is left out and named in the manifest's ``failed`` and in the report.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine import paths
from engine.conversation.export import to_json, to_markdown
from engine.conversation.projects import Project, Projects, file_record
from engine.conversation.session import store
from engine.conversation.session.format import SUFFIX, read_meta
from engine.conversation.store import tree_from_json
from engine.conversation.tree import Conversation
from engine.errors import SessionError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
KIND = "library"  # the manifest's "kind" (with "app": "duet")
PROJECT_FILES = "project-files"  # the zip's folder of the projects' files
VERSION = 1


@dataclass(frozen=True)
class ExportProgress:
    done: int  # conversations written (or left out)
    total: int
    name: str  # the file being written


@dataclass
class ExportReport:
    path: Path
    written: int = 0
    failed: list[str] = field(default_factory=list)


def saved_files(folder: Path) -> list[Path]:
    """The ``.duet`` files of ``folder``, most recently changed first."""
    try:
        files = [(p.stat().st_mtime, p) for p in folder.glob("*" + SUFFIX) if p.is_file()]
    except OSError:
        return []
    return [p for _, p in sorted(files, key=lambda t: t[0], reverse=True)]


def read_conversation(path: Path) -> Conversation:
    """The conversation saved at ``path``, every version (its text; SessionError)."""
    meta = read_meta(path)
    messages = [store.from_saved(m) for m in meta.messages]
    title = meta.settings.get("title")
    conv = Conversation(title if isinstance(title, str) and title.strip() else path.stem, path)
    root = tree_from_json(meta.settings.get("tree"), messages)
    if root is not None:
        conv.set_root(root)
    else:
        conv.set_messages(messages)
    if isinstance(meta.settings.get("preset"), str):
        conv.preset = meta.settings["preset"]
    return conv


def _project(zf: zipfile.ZipFile, p: Project) -> dict[str, Any]:
    """Project ``p`` for the manifest; its files' records go in the zip once each
    (``project-files/<sha256>.json``, as beside projects.json)."""
    files = []
    for a in p.files:
        member = f"{PROJECT_FILES}/{a.sha256}.json"
        if member not in zf.namelist():
            zf.writestr(member, json.dumps(file_record(a), ensure_ascii=False))
        files.append({"name": a.name, "sha256": a.sha256, "json": member})
    return {"name": p.name, "system_prompt": p.system_prompt, "preset": p.preset, "files": files}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def export_all(dest: Path, folder: Path | None = None, *,
               files: Sequence[Path] | None = None,
               progress: Callable[[ExportProgress], None] | None = None) -> ExportReport:
    """Write every conversation of ``folder`` (the conversations folder; or just ``files``) to
    the zip ``dest``, each with its project (engine.conversation.projects). OSError when the
    zip cannot be written; ``progress`` may raise to stop."""
    folder = Path(folder) if folder is not None else paths.conversations_dir()
    files = list(files) if files is not None else saved_files(folder)
    dest = Path(dest)
    report = ExportReport(dest)
    entries: list[dict[str, Any]] = []
    projects = Projects(folder)
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            for i, path in enumerate(files):
                if progress is not None:
                    progress(ExportProgress(i, len(files), path.name))
                try:
                    conv = read_conversation(path)
                    updated = _iso(path.stat().st_mtime)
                except (SessionError, OSError) as e:
                    report.failed.append(f"{path.name}: {e}")
                    continue
                project = projects.of(path)
                more = {"project": project.name} if project is not None else {}
                md, js = f"markdown/{path.stem}.md", f"json/{path.stem}.json"
                entry = {"title": conv.title, "file": path.name, "markdown": md, "json": js,
                         "messages": sum(1 for _ in conv.walk()), "updated": updated, **more}
                data = json.loads(to_json(conv))
                data.update({"file": path.name, "updated": updated, **more})
                zf.writestr(md, to_markdown(conv))
                zf.writestr(js, json.dumps(data, indent=2, ensure_ascii=False))
                entries.append(entry)
                report.written += 1
            manifest = {"app": "duet", "kind": KIND, "version": VERSION,
                        "exported": datetime.now(UTC).isoformat(timespec="seconds"),
                        "conversations": entries, "failed": report.failed,
                        "projects": [_project(zf, p) for p in projects.projects.values()]}
            zf.writestr(MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False))
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return report
