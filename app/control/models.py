"""Which models the window loads, and what follows: the model chosen last loads at the start, the
first run offers the starter models (use them, or fetch them), a choice is checked before it
loads (its remembered settings come back with it), a load's end or failure, the verify cost's
measurement after it, and the settings that wait for the next load.

Every decision changes ``AppState`` (app.control.state) and asks the engine client; the views
follow the state. QtCore only: the tests drive it with no window.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.control import model_memory
from app.control.settings import OPTIONS, Settings
from app.control.state import AppState, Notice
from app.engine_link.client import EngineClient
from app.engine_link.local_server import LocalServer
from app.engine_link.messages import Failure, Fetched, LoadedModel, Progress
from engine import paths
from engine.errors import DuetError
from engine.llama.model import check_gguf_file
from engine.models.catalog import CATALOG
from engine.models.folder import local_models
from engine.models.kind import is_embedding_file

log = logging.getLogger(__name__)


def starter_pair(folder: Path | None = None) -> tuple[Path, Path | None] | None:
    """The starter target in the models folder and its draft (None if absent), or None."""
    folder = folder or paths.models_dir()
    target, draft = (folder / CATALOG[key].filename for key in ("target", "draft"))
    if not target.exists():
        return None
    return target, draft if draft.exists() else None


def installed_models(folder: Path | None = None) -> list[Path]:
    """The chat models in the models folder and its subfolders, smallest first (partial
    downloads, files that only look like models, and embedding models excluded: those serve
    the embeddings, engine.models.kind)."""
    found = [p for p in local_models(folder or paths.models_dir())
             if _is_gguf(p) and not is_embedding_file(p)]
    return sorted(found, key=_size)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def gone_note(path: Path, using: LoadedModel | None) -> str | None:
    """What a conversation made with the model ``path`` says when that file is gone (None: it
    is there, or it is the one in use)."""
    if Path(path).is_file() or (using is not None and _same(using.target_path, path)):
        return None
    then = f"replies use {using.target_name}" if using is not None else \
        "choose a model and press Load"
    where = f"no longer at {Path(path).parent}" if Path(path).parent != Path(".") else \
        "not a model file here"  # (an imported conversation names its app's model only)
    return f"This conversation was made with {Path(path).name}, which is {where}: {then}."


def _same(a: Path, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return Path(a) == Path(b)


def _is_gguf(path: Path) -> bool:
    try:
        check_gguf_file(path)
    except DuetError:
        return False
    return True


class ModelFlow(QObject):
    """``loaded(LoadedModel)`` once the state holds a new model; ``failed(Failure)`` for a load
    or a fetch that failed."""

    loaded = Signal(object)
    failed = Signal(object)

    def __init__(self, client: EngineClient, settings: Settings, state: AppState,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.client, self.settings, self.state = client, settings, state
        self.local_server = LocalServer(client, self)
        w = client.worker
        w.loaded.connect(self.on_loaded)
        w.progress.connect(self.on_progress)
        w.fetched.connect(self.on_fetched)
        w.failed.connect(self.on_failed)
        settings.changed.connect(self.on_setting_changed)

    # -- choosing ------------------------------------------------------------------------------
    def start(self, autoload: bool) -> None:
        """The model chosen last loads at once. Nobody has chosen yet: nothing loads; the
        first-run page offers the starter models (one button) or their fetch, and other
        installed models wait in the models bar for Load."""
        s = self.settings
        target = Path(s["target_model"]) if s["target_model"] else None
        if target is not None and target.exists():
            draft = Path(s["draft_model"]) if s["draft_model"] else None
            self.state.choose(target, draft)
            if autoload:
                self.load(target, draft)
            return
        starters, installed = starter_pair(), installed_models()
        self.state.choose(*(starters or (installed[-1] if installed else None, None)))
        self.state.starters_here = starters is not None
        if starters is not None or not installed:
            self.state.show_page("first_run")

    def choose(self, target: Path | None, draft: Path | None) -> None:
        """The person picked in the models bar (nothing loads until Load)."""
        self.state.choice = (target, draft)

    def use_starters(self) -> None:
        starters = starter_pair()
        if starters is None:  # gone since the window opened
            self.state.starters_here = False
            self.state.show_page("first_run")
            return
        self.load(*starters)

    def load(self, target: Path, draft: Path | None = None, *, fresh: bool = False) -> None:
        """Load ``target`` (with ``draft``), or switch to it when it is kept loaded with the same
        settings (``fresh``: load it again all the same)."""
        try:
            for path in (target, draft):
                if path is not None:
                    check_gguf_file(Path(path))
                    if is_embedding_file(Path(path)):
                        raise DuetError(f"{Path(path).name} is an embedding model: it makes "
                                        "vectors for search, not text, so it cannot chat")
            if str(target) != self.settings["target_model"]:  # another model: its own settings
                remembered = model_memory.recall(Path(target))
                remembered_draft = remembered.pop("draft_model", None)
                if draft is None and remembered_draft:
                    draft = Path(remembered_draft)
                with self.state.recalling_settings():  # they belong to the new model, not the old
                    self.settings.update(remembered)
            config = self.settings.runtime_config(target, draft)
        except (DuetError, ValueError) as e:
            self._refuse(target, draft, f"Could not load the model: {e}")
            return
        self.settings.update({"target_model": str(target), "draft_model": str(draft or "")})
        model_memory.remember(Path(target), self.settings.values)
        self.state.choose(target, draft)
        self.state.load_started(target)
        self.client.load(config, self.settings["models_kept"], fresh=fresh)

    def _refuse(self, target: Path, draft: Path | None, message: str) -> None:
        """A choice that cannot load: say why, keep what is loaded, drop bad files from the
        pickers."""
        bad = tuple(Path(p) for p in (target, draft) if p is not None and
                    (not _is_gguf(Path(p)) or is_embedding_file(Path(p))))
        info = self.state.model
        self.state.refuse(bad, Notice(message + (f" (still using {info.target_name})" if info else ""),
                                      "error", until_load=True))

    def reload(self) -> None:
        """Load the chosen models again (Reload: new settings, a new measurement)."""
        target, draft = self.state.choice
        if target is not None:
            self.load(target, draft, fresh=True)

    def recalibrate(self) -> None:
        """Forget every measured verify-cost curve and reload: the loaded model is measured
        again after the load, between replies (on a quiet machine, for figures that hold)."""
        # lazy: the speculative modules (statistics; ~5 ms) load with the first model that
        # drafts (engine.runtime.runtime), not before the window shows
        from engine.decode.speculative import calibration

        calibration.forget(None)
        if self.state.model is not None and self.state.loading is None:
            self.reload()

    def fetch_starters(self) -> None:
        self.state.set_fetching(True)
        self.client.fetch(("target", "draft"))

    def bring_back(self, path: Path) -> None:
        """The conversation shown was made with the model ``path``: use it again (at once when
        it is kept loaded; its own remembered settings and draft come with it). A file that is
        gone loads nothing (the conversation says so: ``gone_note``); with no model loaded it is
        offered, not loaded; nothing changes while a load is under way (the person chose it)."""
        path = Path(path)
        info = self.state.model
        if self.state.loading is not None or (info is not None and _same(info.target_path, path)):
            return
        if not path.is_file():
            return
        if info is None:  # nothing loaded (--no-autoload, a failed load): an offer, no load
            self.state.say(Notice(f"This conversation was made with {path.name}.", "info",
                                  "Load it", lambda: self.load(path)))
        else:
            self.load(path)

    # -- what the worker says ------------------------------------------------------------------
    def on_loaded(self, info: LoadedModel) -> None:
        if info.switched and not _same(Path(self.settings["target_model"] or "."), info.target_path):
            # the engine switched by itself (a reopened conversation's model, kept loaded): the
            # settings follow it, as if it had been chosen
            remembered = model_memory.recall(Path(info.target_path))
            remembered.pop("draft_model", None)
            with self.state.recalling_settings():
                self.settings.update(remembered)
            self.settings.update({"target_model": str(info.target_path),
                                  "draft_model": str(info.draft_path or "")})
            self.state.choose(info.target_path, info.draft_path)
        self.state.loaded(info)
        if info.switched:
            self.state.show_message(f"Using {info.target_name} (kept loaded)", 4000)
        if self.settings["server_enabled"] and not (
                info.switched and self.local_server.serves(self.client.worker.engines())):
            # serves the new engine; a switch between the models it serves already leaves it
            # running (its clients' replies go on; its default model stays the one it had)
            self.local_server.apply(self.settings.values)
        self.loaded.emit(info)

    def on_progress(self, p: Progress) -> None:
        if p.op == "fetch":
            self.state.fetch_progressed(p.done, p.total, p.text)
        elif p.op == "prompt" and p.total:
            self.state.show_message(f"Reading the prompt: {p.done} / {p.total} tokens", 2000)
        elif p.op == "calibrate":  # after a load, between replies: the status bar says how far
            self.state.measured(p.done, p.total, p.text)
        elif p.text:
            self.state.show_message(p.text, 3000)

    def on_failed(self, failure: Failure) -> None:
        if failure.op == "load":
            notice = Notice("Loading was cancelled: choose a model and press Load.", "info",
                            until_load=True) if failure.cancelled else \
                Notice(f"Could not load the model: {failure.message}", "error", until_load=True)
            self.state.load_failed(failure.message, notice)
        elif failure.op == "fetch":
            self.state.set_fetching(False)
            self.state.say(Notice(f"Fetching the starter models stopped: {failure.message}", "error"))
        else:
            return
        self.failed.emit(failure)

    def on_fetched(self, fetched: Fetched) -> None:
        self.state.set_fetching(False)
        target, *rest = fetched.paths
        self.load(target, rest[0] if rest else None)

    # -- settings --------------------------------------------------------------------------
    def on_setting_changed(self, name: str) -> None:
        option = OPTIONS[name]
        if name in model_memory.REMEMBERED and self.settings["target_model"] and not self.state.recalling:
            model_memory.remember(Path(self.settings["target_model"]), self.settings.values)
        if name.startswith("server_"):
            self.local_server.apply(self.settings.values)  # off the GUI thread
        elif option.applies == "reload" and option.visible and self.state.wait_for_reload(name):
            labels = ", ".join(OPTIONS[n].label for n in sorted(self.state.pending_reload))
            self.state.say(Notice(f"{labels}: applies at the next model load.", "info",
                                  "Reload now", self.reload, until_load=True))
