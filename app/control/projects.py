"""Projects in the window: which one the conversation list shows, which project each
conversation is in (engine.conversation.projects, one small file beside the conversations),
and the system prompt, preset and files a project gives the conversations in it. QtCore only.
A project's files are read once, off the GUI thread (engine.documents), when they are added.

A conversation not saved yet belongs to the project shown when it was started, and joins it
in the file when it is first saved. Renamed and deleted files keep the list right.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from engine.chat.messages import Attachment
from engine.conversation.library import Library, is_blank
from engine.conversation.presets import Preset, find
from engine.conversation.projects import Project, Projects
from engine.conversation.tree import Conversation
from engine.errors import DuetError

log = logging.getLogger(__name__)

Notify = Callable[[str, str], None]  # (text, kind)


class ProjectFlow(QObject):
    changed = Signal()  # the projects, the one shown or who is in which changed
    _read = Signal(str, object)  # (project, what its new files gave): queued to the GUI thread

    def __init__(self, library: Library, notify: Notify, folder: Path | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.library, self.notify = library, notify
        self.projects = Projects(folder)
        self.selected: str | None = None  # the project the list shows (None: every conversation)
        self._pending: dict[str, str] = {}  # id of a conversation not saved yet → its project
        self.presets: Callable[[], Sequence[Preset]] = lambda: ()  # the presets there are
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="duet-project-files")
        self._read.connect(self._take_files)
        library.subscribe(self._on_library)

    # -- what the list shows -----------------------------------------------------------------
    def project_of(self, conv: Conversation) -> Project | None:
        name = self._pending.get(conv.id)
        if name is not None:
            return self.projects.projects.get(name)
        return self.projects.of(conv.path)

    def shows(self, conv: Conversation) -> bool:
        """Whether the list shows ``conv`` (it is in the project shown, or none is chosen)."""
        if self.selected is None:
            return True
        project = self.project_of(conv)
        return project is not None and project.name == self.selected

    def system_prompt(self, conv: Conversation) -> str | None:
        """The system prompt of ``conv``'s project (None: none, or it has none)."""
        project = self.project_of(conv)
        return project.system_prompt if project is not None and project.system_prompt else None

    def preset(self, conv: Conversation) -> Preset | None:
        """The preset of ``conv``'s project (None: none, or a preset no longer there)."""
        project = self.project_of(conv)
        return find(self.presets(), project.preset) if project is not None and project.preset \
            else None

    def reload(self) -> None:
        """Read the projects again (an import of Duet's export wrote them from its thread)."""
        self.projects = Projects(self.projects.path.parent)
        if self.selected not in self.projects.projects:
            self.selected = None
        self.changed.emit()

    def files(self, conv: Conversation) -> tuple[Attachment, ...]:
        """The files of ``conv``'s project (none: in no project)."""
        project = self.project_of(conv)
        return project.files if project is not None else ()

    def select(self, name: str | None) -> None:
        self.selected = name if name in self.projects.projects else None
        current = self.library.current
        if current is not None and is_blank(current):  # a new chat starts in the project shown
            self._adopt(current)
        self.changed.emit()

    # -- changes the person asks for -----------------------------------------------------------
    def create(self, name: str) -> str | None:
        """A new project; its name (None: it could not be made)."""
        try:
            project = self.projects.add(name)
        except ValueError as e:
            self.notify(f"Cannot make the project: {e}.", "error")
            return None
        except OSError as e:
            self.notify(f"Cannot save the projects: {e.strerror or e}", "error")
            return None
        self.changed.emit()
        return project.name

    def rename(self, old: str, new: str) -> None:
        try:
            name = self.projects.rename(old, new)
        except OSError as e:
            self.notify(f"Cannot save the projects: {e.strerror or e}", "error")
            return
        if self.selected == old:
            self.selected = name
        self._pending = {c: (name if n == old else n) for c, n in self._pending.items()}
        self.changed.emit()

    def set_prompt(self, name: str, text: str) -> None:
        self._write(lambda: self.projects.set_prompt(name, text))
        self.changed.emit()

    def set_preset(self, name: str, preset: str | None) -> None:
        self._write(lambda: self.projects.set_preset(name, preset))
        self.changed.emit()

    def add_files(self, name: str, files: Iterable[Path]) -> None:
        """Read ``files`` (off the GUI thread) and give them to project ``name``; a file that
        cannot be read is one line in the window, the others are added."""
        future = self._pool.submit(read_files, list(files))
        future.add_done_callback(lambda f: self._read.emit(name, f.result()))

    def remove_file(self, name: str, sha256: str) -> None:
        self._write(lambda: self.projects.remove_file(name, sha256))
        self.changed.emit()

    def _take_files(self, name: str, results: list[Attachment | str]) -> None:
        for line in (r for r in results if isinstance(r, str)):
            self.notify(line, "error")
        try:
            self.projects.add_files(name, [r for r in results if isinstance(r, Attachment)])
        except ValueError as e:
            self.notify(f"Cannot add the file: {e}.", "error")
        except OSError as e:
            self.notify(f"Cannot save the projects: {e.strerror or e}", "error")
        self.changed.emit()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def remove(self, name: str) -> None:
        self._write(lambda: self.projects.remove(name))
        self._pending = {c: n for c, n in self._pending.items() if n != name}
        if self.selected == name:
            self.selected = None
        self.changed.emit()

    def move(self, ids: Iterable[str], name: str | None) -> None:
        """Put the conversations ``ids`` in project ``name`` (None: in none)."""
        convs = [c for c in map(self.library.by_id, ids) if c is not None]
        files = [c.path for c in convs if c.path is not None]
        for conv in convs:
            if conv.path is None and name is not None:
                self._pending[conv.id] = name
            else:
                self._pending.pop(conv.id, None)
        if files:
            self._write(lambda: self.projects.move(files, name))
        self.changed.emit()

    # -- the files -----------------------------------------------------------------------------
    def saved(self, cid: str, path: Path) -> None:
        """A conversation was saved at ``path``: one waiting for its project joins it."""
        name = self._pending.pop(cid, None)
        if name is not None and name in self.projects.projects:
            self._write(lambda: self.projects.move([path], name))

    def renamed(self, old: Path, new: Path) -> None:
        self._write(lambda: self.projects.renamed(old, new))

    def deleted(self, path: Path) -> None:
        self._write(lambda: self.projects.forget(path))

    def _on_library(self, kind: str, conv: Conversation | None) -> None:
        if kind == "current" and conv is not None and is_blank(conv):
            self._adopt(conv)

    def _adopt(self, conv: Conversation) -> None:
        if self.selected is None:
            self._pending.pop(conv.id, None)
        else:
            self._pending[conv.id] = self.selected

    def _write(self, change: Callable[[], object]) -> None:
        try:
            change()
        except OSError as e:
            self.notify(f"Cannot save the projects: {e.strerror or e}", "error")


def read_files(files: list[Path]) -> list[Attachment | str]:
    """Each of ``files`` read once (its attachment), or the one line that says why it cannot
    be (engine.documents.extract says it: a missing file, a picture, an unknown kind). Never
    raises."""
    # lazy: the document readers load with the first file read, not with the window
    from engine.documents.extract import read_document
    from engine.prompts.attachments import attachment

    out: list[Attachment | str] = []
    for path in files:
        try:
            out.append(attachment(read_document(path)))
        except DuetError as e:
            out.append(str(e))
        except Exception as e:  # noqa: BLE001 - a reader's bug is one line, not a lost window
            log.error("reading %s for a project failed", path, exc_info=e)
            out.append(f"{path.name}: the file could not be read ({type(e).__name__})")
    return out
