"""Projects: named folders of conversations, each with a system prompt, a preset (by name:
its sampling, drafter and system prompt) and files that every conversation in it uses unless the
conversation has its own prompt or preset. No Qt.

One small file beside the conversations (``projects.json``, version 1) holds the projects and
which conversation file is in which (by file name: the conversations folder is flat), so that
moving a conversation between projects rewrites no ``.duet`` file, its KV state, the import
ledger or the search index. A damaged file is set aside (engine.localfile.read_json) and the
conversations are then in no project; nothing else is lost.

A project's files are read once when they are added (engine.documents, as a message's are) and
kept by content beside it (``project-files/<sha256>.json``: its kind, text and pages; the
project lists each by name and SHA-256), so that two projects with the same file keep it once
and projects.json stays small. A conversation
started in the project carries them on its first message (app.control.conversation_settings),
whole or as the passages that message finds, like files attached there: every conversation of
the project then begins with the same tokens, which the disk KV store restores instead of
reading the file again. A file whose record is missing or damaged is left out with a logged
warning; the project keeps the rest.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import paths
from engine.chat.messages import Attachment
from engine.localfile import MAX_BYTES, read_json, write_bytes, write_json

log = logging.getLogger(__name__)

FILENAME = "projects.json"
VERSION = 1
MAX_NAME = 80
FILES_DIR = "project-files"  # beside projects.json: each file's record, by its content's SHA-256
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Project:
    name: str
    system_prompt: str = ""  # "" : the conversations use the settings' system prompt
    preset: str = ""  # the name of a preset (engine.conversation.presets); "" : none
    files: tuple[Attachment, ...] = ()  # read once, given to each conversation started in it


def _check(data: Any) -> None:
    if not isinstance(data, dict) or data.get("version") != VERSION or \
            not isinstance(data.get("projects"), list) or not isinstance(data.get("members"), dict):
        raise ValueError("it is not a list of projects of version 1")


def check_file(data: Any) -> None:
    """ValueError unless ``data`` is a project file's record (``{"kind", "text", "pages"}``)."""
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str)
                                             for k in ("kind", "text")) or \
            not isinstance(data.get("pages"), list) or \
            not all(isinstance(n, int) and n >= 0 for n in data["pages"]):
        raise ValueError("it is not a project's file")


def file_record(a: Attachment) -> dict[str, Any]:
    """What is kept of a project's file, by its SHA-256 (its name is the project's)."""
    return {"kind": a.kind, "text": a.text, "pages": list(a.pages)}


def file_from(name: str, sha256: str, data: Any) -> Attachment | None:
    """The project file ``name`` of record ``data`` (None: not a record, or not a SHA-256)."""
    try:
        check_file(data)
    except ValueError:
        return None
    if not _SHA256.fullmatch(sha256):
        return None
    return Attachment(name, data["kind"], sha256, data["text"], tuple(data["pages"]))


def clean_name(name: str) -> str:
    """A project's name on one line, at most MAX_NAME characters ("" : no name)."""
    return " ".join(name.split())[:MAX_NAME]


class Projects:
    """The projects of the conversations folder ``folder`` (default: Duet's). Each change is
    written at once; OSError when the file cannot be written."""

    def __init__(self, folder: Path | None = None) -> None:
        self.path = (folder or paths.conversations_dir()) / FILENAME
        self.files_dir = self.path.parent / FILES_DIR
        self.projects: dict[str, Project] = {}
        self.members: dict[str, str] = {}  # conversation file name → project name
        data = read_json(self.path, _check)
        if data is not None:
            for p in data["projects"]:
                if isinstance(p, dict) and isinstance(p.get("name"), str) and clean_name(p["name"]):
                    prompt, preset = p.get("system_prompt"), p.get("preset")
                    name = clean_name(p["name"])
                    files = p.get("files")
                    self.projects[name] = Project(name, prompt if isinstance(prompt, str) else "",
                                                  preset if isinstance(preset, str) else "",
                                                  self._read_files(files, name))
            self.members = {f: n for f, n in data["members"].items()
                            if isinstance(f, str) and n in self.projects}

    @property
    def names(self) -> list[str]:
        return sorted(self.projects, key=str.casefold)

    def _read_files(self, listed: Any, project: str) -> tuple[Attachment, ...]:
        """The files ``listed`` (each ``{"name", "sha256"}``) of ``project``, from their records."""
        out: list[Attachment] = []
        for entry in listed if isinstance(listed, list) else ():
            name, sha = (entry.get("name"), entry.get("sha256")) if isinstance(entry, dict) \
                else (None, None)
            if not isinstance(name, str) or not isinstance(sha, str) or \
                    not _SHA256.fullmatch(sha):
                continue
            a = file_from(name, sha, read_json(self.files_dir / f"{sha}.json", check_file))
            if a is None:
                log.warning("project %s: the file %s… is missing or damaged; left out",
                            project, sha[:12])
                continue
            out.append(a)
        return tuple(out)

    def _write(self) -> None:
        write_json(self.path, {"version": VERSION,
                               "projects": [{"name": p.name, "system_prompt": p.system_prompt,
                                             "preset": p.preset,
                                             "files": [{"name": a.name, "sha256": a.sha256}
                                                       for a in p.files]}
                                            for p in self.projects.values()],
                               "members": self.members}, indent=1)

    # -- the projects ------------------------------------------------------------------------
    def add(self, name: str) -> Project:
        """A new project named ``name`` (or ``name (2)``… when taken); ValueError: no name."""
        base = clean_name(name)
        if not base:
            raise ValueError("a project needs a name")
        name, n = base, 2
        while name.casefold() in (k.casefold() for k in self.projects):
            name, n = f"{base} ({n})", n + 1
        self.projects[name] = Project(name)
        self._write()
        return self.projects[name]

    def set_prompt(self, name: str, system_prompt: str) -> None:
        if name in self.projects:
            self.projects[name] = replace(self.projects[name], system_prompt=system_prompt.strip())
            self._write()

    def set_preset(self, name: str, preset: str | None) -> None:
        """Give project ``name`` the preset named ``preset`` (None: none)."""
        if name in self.projects:
            self.projects[name] = replace(self.projects[name], preset=preset or "")
            self._write()

    def add_files(self, name: str, files: Iterable[Attachment]) -> None:
        """Give project ``name`` the files ``files`` (read once: engine.prompts.attachments
        makes them); one it has already (same content) is not added twice. ValueError: a file
        too large to keep with a project (its text over MAX_BYTES as JSON)."""
        project = self.projects.get(name)
        if project is None:
            return
        have = {a.sha256 for a in project.files}
        added = []
        for a in files:
            if a.sha256 in have or not _SHA256.fullmatch(a.sha256):
                continue
            record = json.dumps(file_record(a)).encode()  # (as write_json writes it)
            if len(record) > MAX_BYTES:
                raise ValueError(f"{a.name} is too large to keep with a project (at most "
                                 f"{MAX_BYTES // 2**20} MB of text): attach it to a message")
            kept = self.files_dir / f"{a.sha256}.json"
            if read_json(kept, check_file) is None:  # (else another project has it already)
                self.files_dir.mkdir(parents=True, exist_ok=True)
                write_bytes(kept, record)
            have.add(a.sha256)
            added.append(replace(a, mode="auto"))
        if added:
            self.projects[name] = replace(project, files=project.files + tuple(added))
            self._write()

    def remove_file(self, name: str, sha256: str) -> None:
        """Take the file ``sha256`` from project ``name`` (its record goes when no project
        has it)."""
        project = self.projects.get(name)
        if project is None or all(a.sha256 != sha256 for a in project.files):
            return
        self.projects[name] = replace(project, files=tuple(a for a in project.files
                                                           if a.sha256 != sha256))
        self._write()
        self._drop_unused(sha256)

    def _drop_unused(self, sha256: str) -> None:
        if all(a.sha256 != sha256 for p in self.projects.values() for a in p.files):
            (self.files_dir / f"{sha256}.json").unlink(missing_ok=True)

    def rename(self, old: str, new: str) -> str:
        """Rename project ``old``; its new name (unchanged when ``new`` is empty or taken)."""
        new = clean_name(new)
        if old not in self.projects or not new or new == old or \
                new.casefold() in (k.casefold() for k in self.projects if k != old):
            return old
        self.projects = {(new if k == old else k): (replace(p, name=new) if k == old else p)
                         for k, p in self.projects.items()}
        self.members = {f: (new if n == old else n) for f, n in self.members.items()}
        self._write()
        return new

    def remove(self, name: str) -> None:
        """Delete project ``name``; its conversations stay, in no project."""
        project = self.projects.pop(name, None)
        if project is not None:
            self.members = {f: n for f, n in self.members.items() if n != name}
            self._write()
            for a in project.files:
                self._drop_unused(a.sha256)

    # -- the conversations -------------------------------------------------------------------
    def of(self, path: Path | None) -> Project | None:
        """The project of the conversation saved at ``path`` (None: in none, or not saved)."""
        name = self.members.get(path.name) if path is not None else None
        return self.projects.get(name) if name is not None else None

    def move(self, files: Iterable[Path], name: str | None) -> None:
        """Put the conversations saved at ``files`` in project ``name`` (None: in none)."""
        for path in files:
            if name is None or name not in self.projects:
                self.members.pop(path.name, None)
            else:
                self.members[path.name] = name
        self._write()

    def renamed(self, old: Path, new: Path) -> None:
        name = self.members.pop(old.name, None)
        if name is not None:
            self.members[new.name] = name
            self._write()

    def forget(self, path: Path) -> None:
        if self.members.pop(path.name, None) is not None:
            self._write()
