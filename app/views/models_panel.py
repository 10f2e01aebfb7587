"""Choosing and loading models: the models bar, and the first-run panel when there are none.

The bar lists the GGUF files of the models folder and its subfolders (starter models by their
catalogue name, downloads from Hugging Face as ``publisher/repo/file``) and any file picked with
Browse… or dropped on the window; Load sends both choices to the worker. After a load it shows
what was loaded and the draft/target compatibility verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.control.models import installed_models
from app.control.state import AppState
from app.engine_link.messages import LoadedModel
from app.views.workers_view import WorkerMonitor
from engine import paths
from engine.models.catalog import CATALOG
from engine.models.folder import label, starter_name

log = logging.getLogger(__name__)

BROWSE = "__browse__"
GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"


def gguf_paths(urls: Iterable[QUrl]) -> list[Path]:
    return [Path(u.toLocalFile()) for u in urls
            if u.isLocalFile() and u.toLocalFile().lower().endswith(".gguf")]


def label_for(path: Path) -> str:
    return label(path, paths.models_dir())


class ModelsPanel(QWidget):
    """``load_requested(target, draft_or_None)``; ``choice_changed(target, draft)`` on any pick;
    ``cancel_requested`` by the Cancel button shown while a load runs."""

    load_requested = Signal(object, object)
    choice_changed = Signal(object, object)
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAcceptDrops(True)
        self.target_combo = QComboBox(self)
        self.draft_combo = QComboBox(self)
        for combo in (self.target_combo, self.draft_combo):
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            combo.setMinimumContentsLength(18)
            combo.activated.connect(lambda _i, c=combo: self._on_activated(c))
        self.target_combo.setToolTip("The model that answers (drop a .gguf file here)")
        self.draft_combo.setToolTip("A small model that drafts tokens for the target to verify")
        self.load_button = QPushButton("Load", self)
        self.load_button.clicked.connect(self._request_load)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setToolTip("Stop loading the model")
        self.cancel_button.clicked.connect(self.cancel_requested)
        self.cancel_button.setVisible(False)
        self.hub_button = QPushButton("Hugging Face…", self)
        self.hub_button.setToolTip("Search Hugging Face for GGUF models and download one")
        self.hub_button.clicked.connect(self.open_hub)
        self.busy = QProgressBar(self)
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(90)
        self.busy.setTextVisible(False)
        self.busy.setVisible(False)
        self.status = QLabel("No model loaded", self)
        self.status.setObjectName("modelStatus")
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status.setWordWrap(True)
        self.workers = QLabel(self)
        self.workers.setObjectName("rpcWorkers")
        self.workers.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.workers.setVisible(False)
        self.monitor = WorkerMonitor(self)
        self.monitor.changed.connect(self._show_workers)

        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Target", self))
        row.addWidget(self.target_combo)
        row.addSpacing(8)
        row.addWidget(QLabel("Draft", self))
        row.addWidget(self.draft_combo)
        row.addWidget(self.load_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.hub_button)
        row.addWidget(self.busy)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 4)
        layout.setSpacing(4)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.workers)
        self._extra: list[Path] = []
        self.populate()

    # -- choices ---------------------------------------------------------------------------
    def populate(self, target: Path | None = None, draft: Path | None = None) -> None:
        """Refill both lists (models folder + extra files), keeping or setting the choices."""
        target = target or self.target()
        draft = draft if draft is not None else self.draft()
        files = installed_models()
        for p in (target, draft, *self._extra):
            if p is not None and p not in files:
                files.append(p)
        for combo, none_item in ((self.target_combo, None), (self.draft_combo, "None")):
            combo.blockSignals(True)
            combo.clear()
            if none_item:
                combo.addItem(none_item, None)
            for p in files:
                combo.addItem(label_for(p), str(p))
                combo.setItemData(combo.count() - 1, str(p), Qt.ItemDataRole.ToolTipRole)
            combo.addItem("Browse…", BROWSE)
            combo.blockSignals(False)
        self._select(self.target_combo, target)
        self._select(self.draft_combo, draft)
        self.load_button.setEnabled(self.target() is not None)

    def target(self) -> Path | None:
        data = self.target_combo.currentData()
        return Path(data) if data and data != BROWSE else None

    def draft(self) -> Path | None:
        data = self.draft_combo.currentData()
        return Path(data) if data and data != BROWSE else None

    def set_choice(self, path: Path, *, as_draft: bool = False) -> None:
        if path not in self._extra and not path.is_relative_to(paths.models_dir()):
            self._extra.append(path)
        if as_draft:
            self.populate(self.target(), path)
        else:
            self.populate(path, self.draft())
        self.choice_changed.emit(self.target(), self.draft())

    def forget(self, path: Path) -> None:
        """Take ``path`` off the lists (a file that turned out not to be a model)."""
        if path in self._extra:
            self._extra.remove(path)
        for combo in (self.target_combo, self.draft_combo):
            index = combo.findData(str(path))
            if index >= 0:
                combo.removeItem(index)

    def _select(self, combo: QComboBox, path: Path | None) -> None:
        index = combo.findData(str(path)) if path else -1
        if index < 0:
            index = 0 if combo is self.draft_combo or combo.count() > 1 else -1
        combo.setCurrentIndex(index)

    def _on_activated(self, combo: QComboBox) -> None:
        if combo.currentData() == BROWSE:
            as_draft = combo is self.draft_combo
            path = self.browse(as_draft)
            if path is None:
                self.populate()
                return
            self.set_choice(path, as_draft=as_draft)
        else:
            self.load_button.setEnabled(self.target() is not None)
            self.choice_changed.emit(self.target(), self.draft())

    def browse(self, as_draft: bool = False) -> Path | None:
        title = "Choose a draft model" if as_draft else "Choose a target model"
        name, _ = QFileDialog.getOpenFileName(self, title, str(paths.models_dir()), GGUF_FILTER)
        return Path(name) if name else None

    def open_hub(self) -> None:
        """The Browse Hugging Face dialog; a downloaded model becomes the target choice."""
        from app.views.hub_dialog import HubDialog  # lazy: huggingface_hub (~0.1 s) only when the dialog opens

        dialog = HubDialog(self)
        dialog.model_ready.connect(lambda path: self.set_choice(Path(path)))
        dialog.exec()
        dialog.deleteLater()

    def _request_load(self) -> None:
        if self.target() is not None:
            self.load_requested.emit(self.target(), self.draft())

    # -- drag and drop ---------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if gguf_paths(event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        files = gguf_paths(event.mimeData().urls())
        if files:
            pos = event.position().toPoint()
            on_draft = self.draft_combo.geometry().contains(pos)
            self.handle_drop(files[0], as_draft=on_draft)
            event.acceptProposedAction()

    def handle_drop(self, path: Path, *, as_draft: bool = False) -> None:
        """A dropped GGUF becomes the target (or the draft) and is loaded at once."""
        self.set_choice(path, as_draft=as_draft)
        self._request_load()

    # -- state -----------------------------------------------------------------------------
    def observe(self, state: AppState, worker_lost: Callable[[], str | None] | None = None) -> None:
        """Follow the choice, a load and its end; ``worker_lost`` names an RPC worker of the
        loaded models that went away."""
        def on_change(what: str) -> None:
            if what == "choice":
                self.populate(*state.choice)
            elif what == "refused":
                for path in state.refused:
                    self.forget(path)
            elif what == "loading" and state.loading is not None:
                self.set_loading(True, f"Loading {state.loading.name}…")
            elif what == "model" and state.model is not None:
                self.show_loaded(state.model, worker_lost)
            elif what == "model" and state.load_error is not None:
                self.show_failed(state.load_error)
        state.subscribe(on_change)

    def set_loading(self, on: bool, text: str = "") -> None:
        self.busy.setVisible(on)
        self.cancel_button.setVisible(on)
        self.load_button.setEnabled(not on and self.target() is not None)
        self.target_combo.setEnabled(not on)
        self.draft_combo.setEnabled(not on)
        if text:
            self.status.setText(text)

    def show_loaded(self, info: LoadedModel, worker_lost: Callable[[], str | None] | None = None) -> None:
        """``worker_lost``: names an RPC worker of the loaded models that went away (None: not
        watched)."""
        self.set_loading(False)
        self.status.setText(describe(info))
        self.monitor.watch(info.workers, worker_lost)

    def _show_workers(self, text: str) -> None:
        self.workers.setText(text)
        self.workers.setVisible(bool(text))

    def show_failed(self, message: str) -> None:
        self.set_loading(False)
        self.monitor.watch((), None)  # the models were unloaded
        self.status.setText(f"Not loaded: {message}")


def describe(info: LoadedModel) -> str:
    """One line: what is loaded, the drafter, and the draft/target compatibility verdict."""
    folder = paths.models_dir()
    name = starter_name(info.target_path, folder) or info.target_name
    text = f"{name} loaded ({info.n_ctx:,} tokens of context, {info.load_s:.1f} s)"
    if not info.chats:
        text += " · completion only (no chat template)"
    if info.draft_path is not None:
        if info.draft_problem:
            text += f" · draft refused: {info.draft_problem}"
        else:
            draft = starter_name(info.draft_path, folder) or info.draft_name or \
                info.draft_path.name
            text += f" · draft {draft}: compatible"
    return text + f" · drafter: {info.drafter}"


class FirstRunPanel(QWidget):
    """Shown while nobody has chosen a model: use the starter models when they are here (one
    button), else fetch them; or open a GGUF file."""

    use_requested = Signal()
    fetch_requested = Signal()
    open_requested = Signal()
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel(self)
        self.text = QLabel(self)
        self.text.setWordWrap(True)
        self.use_button = QPushButton("Use the starter models", self)
        self.use_button.clicked.connect(self.use_requested)
        self.fetch_button = QPushButton("Fetch the starter models", self)
        self.open_button = QPushButton("Open a GGUF file…", self)
        self.cancel_button = QPushButton("Cancel", self)
        self.progress = QProgressBar(self)
        self.progress_label = QLabel(self)
        self.fetch_button.clicked.connect(self.fetch_requested)
        self.open_button.clicked.connect(self.open_requested)
        self.cancel_button.clicked.connect(self.cancel_requested)
        buttons = QHBoxLayout()
        buttons.addWidget(self.use_button)
        buttons.addWidget(self.fetch_button)
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(32, 32, 32, 32)
        layout.addWidget(self.title)
        layout.addWidget(self.text)
        layout.addLayout(buttons)
        layout.addWidget(self.progress)
        layout.addWidget(self.progress_label)
        layout.addStretch(1)
        self.offer_starters(False)
        self.set_fetching(False)

    def offer_starters(self, here: bool) -> None:
        """``here``: the starter models are in the models folder (Use them), else Fetch them."""
        size_gb = sum(CATALOG[k].size for k in ("target", "draft")) / 1e9
        if here:
            self.title.setText("<h2>Choose a model</h2>")
            self.text.setText("Duet runs GGUF language models on this computer. The starter models "
                              "(Qwen2.5-Coder 1.5B with a 0.5B draft) are here: use them, or open "
                              "another GGUF file.")
        else:
            self.title.setText("<h2>No model yet</h2>")
            self.text.setText("Duet runs GGUF language models on this computer. Fetch the "
                              "starter models (Qwen2.5-Coder 1.5B with a 0.5B draft, about "
                              f"{size_gb:.1f} GB) or open a GGUF file you already have.")
        self.use_button.setVisible(here)
        self.fetch_button.setVisible(not here)

    def observe(self, state: AppState) -> None:
        """Follow the starter models' fetch, and whether they are here."""
        def on_change(what: str) -> None:
            if what == "fetching":
                self.set_fetching(state.fetching)
            elif what == "fetch_progress":
                self.show_progress(*state.fetch_progress)
            elif what == "page" and state.page == "first_run":
                self.offer_starters(state.starters_here)
        state.subscribe(on_change)

    def set_fetching(self, on: bool) -> None:
        self.fetch_button.setEnabled(not on)
        self.open_button.setEnabled(not on)
        self.cancel_button.setVisible(on)
        self.progress.setVisible(on)
        self.progress_label.setVisible(on)
        if on:
            self.progress.setRange(0, 0)
            self.progress_label.setText("Starting…")

    def show_progress(self, done: int, total: int, text: str) -> None:
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * done / total))
        self.progress_label.setText(f"{text} — {done / 1e6:.0f} / {total / 1e6:.0f} MB")
