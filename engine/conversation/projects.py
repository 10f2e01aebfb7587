"""Projects: named folders of conversations, each with a system prompt and a preset (by name:
its sampling, drafter and system prompt) that every conversation in it uses unless the
conversation has its own. No Qt.

One small file beside the conversations (``projects.json``, version 1) holds the projects and
which conversation file is in which (by file name: the conversations folder is flat), so that
moving a conversation between projects rewrites no ``.duet`` file, its KV state, the import
ledger or the search index. A damaged file is set aside (engine.localfile.read_json) and the
conversations are then in no project; nothing else is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import paths
from engine.localfile import read_json, write_json

log = logging.getLogger(__name__)

FILENAME = "projects.json"
VERSION = 1
MAX_NAME = 80


@dataclass(frozen=True)
class Project:
    name: str
    system_prompt: str = ""  # "" : the conversations use the settings' system prompt
    preset: str = ""  # the name of a preset (engine.conversation.presets); "" : none


def _check(data: Any) -> None:
    if not isinstance(data, dict) or data.get("version") != VERSION or \
            not isinstance(data.get("projects"), list) or not isinstance(data.get("members"), dict):
        raise ValueError("it is not a list of projects of version 1")


def clean_name(name: str) -> str:
    """A project's name on one line, at most MAX_NAME characters ("" : no name)."""
    return " ".join(name.split())[:MAX_NAME]


class Projects:
    """The projects of the conversations folder ``folder`` (default: Duet's). Each change is
    written at once; OSError when the file cannot be written."""

    def __init__(self, folder: Path | None = None) -> None:
        self.path = (folder or paths.conversations_dir()) / FILENAME
        self.projects: dict[str, Project] = {}
        self.members: dict[str, str] = {}  # conversation file name → project name
        data = read_json(self.path, _check)
        if data is not None:
            for p in data["projects"]:
                if isinstance(p, dict) and isinstance(p.get("name"), str) and clean_name(p["name"]):
                    prompt, preset = p.get("system_prompt"), p.get("preset")
                    name = clean_name(p["name"])
                    self.projects[name] = Project(name, prompt if isinstance(prompt, str) else "",
                                                  preset if isinstance(preset, str) else "")
            self.members = {f: n for f, n in data["members"].items()
                            if isinstance(f, str) and n in self.projects}

    @property
    def names(self) -> list[str]:
        return sorted(self.projects, key=str.casefold)

    def _write(self) -> None:
        write_json(self.path, {"version": VERSION,
                               "projects": [{"name": p.name, "system_prompt": p.system_prompt,
                                             "preset": p.preset}
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
        if self.projects.pop(name, None) is not None:
            self.members = {f: n for f, n in self.members.items() if n != name}
            self._write()

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
