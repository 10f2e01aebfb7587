"""Browse Hugging Face: search → pick a file → will it fit? → download with progress → ready to load.

Every Hub call runs on a :class:`HubTask` (a QThread running one engine/models/hub function); the dialog
hears back through queued signals, so the GUI thread never waits on the network. One task runs
at a time; Cancel stops a download between chunks and keeps the partial file for a resume.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QThread, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import paths
from engine.errors import DuetError
from engine.llama.devices import gpu_memory, gpus
from engine.models.hub import fit
from engine.models.hub.download import DownloadProgress, download_entry
from engine.models.hub.files import GGUFEntry
from engine.models.hub.remote_header import remote_header
from engine.models.hub.search import RepoFiles, repo_files, search

log = logging.getLogger(__name__)


class HubTask(QThread):
    """Runs ``fn(report)`` off the GUI thread; ``report(x)`` emits ``progress(x)``."""

    succeeded = Signal(object)
    failed = Signal(str)
    progress = Signal(object)

    def __init__(self, fn: Callable[[Callable[[Any], None]], Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._fn = fn

    def run(self) -> None:
        try:
            self.succeeded.emit(self._fn(self.progress.emit))
        except DuetError as e:
            self.failed.emit(str(e))
        except Exception as e:  # never let a worker thread die silently
            log.exception("Hugging Face task failed")
            self.failed.emit(f"unexpected error: {e}")


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


class HubDialog(QDialog):
    """``model_ready(path)`` once a download is verified and in the models folder."""

    model_ready = Signal(object)

    def __init__(self, parent: QWidget | None = None, dest: Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Browse Hugging Face")
        self.resize(760, 520)
        self._dest = dest or paths.models_dir()
        self._task: HubTask | None = None
        self._cancel = threading.Event()
        self._files: RepoFiles | None = None
        self.ready_path: Path | None = None

        self.query = QLineEdit(self)
        self.query.setPlaceholderText("Search GGUF models, e.g. qwen2.5 coder")
        self.query.returnPressed.connect(self.start_search)
        self.search_button = QPushButton("Search", self)
        self.search_button.clicked.connect(self.start_search)
        self.repos = QListWidget(self)
        self.repos.currentItemChanged.connect(self._repo_chosen)
        self.files = QTableWidget(0, 3, self)
        self.files.setHorizontalHeaderLabels(["Quantization", "Size", "File"])
        self.files.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.files.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.files.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.files.horizontalHeader().setStretchLastSection(True)
        self.files.itemSelectionChanged.connect(self.start_fit)
        self.ctx = QSpinBox(self)
        self.ctx.setRange(512, 1 << 20)
        self.ctx.setSingleStep(1024)
        self.ctx.setValue(4096)
        self.ctx.setPrefix("context ")
        self.ctx.editingFinished.connect(self.start_fit)
        self.gpu_layers = QSpinBox(self)  # -1: every layer
        self.gpu_layers.setRange(-1, 999)
        self.gpu_layers.setSpecialValueText("GPU layers: all")
        self.gpu_layers.setPrefix("GPU layers: ")
        self.gpu_layers.setValue(-1 if gpus() else 0)
        self.gpu_layers.editingFinished.connect(self.start_fit)
        self.fit_label = QLabel("Pick a file to see whether it fits.", self)
        self.fit_label.setWordWrap(True)
        self.fit_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download_button = QPushButton("Download", self)
        self.download_button.setEnabled(False)
        self.download_button.clicked.connect(self.start_download)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self._cancel.set)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1000)
        self.progress.setVisible(False)
        self.status = QLabel("", self)
        self.status.setObjectName("hubStatus")
        self.status.setWordWrap(True)

        top = QHBoxLayout()
        top.addWidget(self.query, 1)
        top.addWidget(self.search_button)
        lists = QHBoxLayout()
        lists.addWidget(self.repos, 2)
        lists.addWidget(self.files, 3)
        fit_row = QHBoxLayout()
        fit_row.addWidget(self.ctx)
        fit_row.addWidget(self.gpu_layers)
        fit_row.addWidget(self.fit_label, 1)
        actions = QHBoxLayout()
        actions.addWidget(self.progress, 1)
        actions.addWidget(self.download_button)
        actions.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(lists, 1)
        layout.addLayout(fit_row)
        layout.addLayout(actions)
        layout.addWidget(self.status)

    # -- tasks -----------------------------------------------------------------------------
    def busy(self) -> bool:
        return self._task is not None and self._task.isRunning()

    def _run(self, fn: Callable, on_done: Callable[[Any], None], on_progress: Callable | None = None) -> bool:
        if self.busy():
            self.status.setText("Busy: wait for the current request, or cancel it.")
            return False
        task = HubTask(fn, self)
        task.succeeded.connect(on_done)
        task.failed.connect(self._failed)
        if on_progress is not None:
            task.progress.connect(on_progress)
        task.finished.connect(self._task_finished)
        self._task = task
        task.start()
        return True

    def _task_finished(self) -> None:
        self.cancel_button.setEnabled(False)
        self.search_button.setEnabled(True)

    def _failed(self, message: str) -> None:
        self.progress.setVisible(False)
        self.status.setText(message)

    # -- search → files → fit → download --------------------------------------------------------
    def start_search(self) -> None:
        text = self.query.text().strip()
        if self._run(lambda _report: search(text), self._show_hits):
            self.search_button.setEnabled(False)
            self.status.setText(f"Searching Hugging Face for {text!r}…")

    def _show_hits(self, hits: list) -> None:
        self.repos.clear()
        for h in hits:
            item = QListWidgetItem(h.repo)
            item.setToolTip(f"{h.downloads} downloads, {h.likes} likes" + (", gated" if h.gated else ""))
            self.repos.addItem(item)
        self.status.setText(f"{len(hits)} repositories" if hits else "No GGUF repositories match.")

    def _repo_chosen(self, item: QListWidgetItem | None, _previous: object = None) -> None:
        if item is not None:
            self.start_files(item.text())

    def start_files(self, repo: str) -> None:
        if self._run(lambda _report: repo_files(repo), self._show_files):
            self.status.setText(f"Listing {repo}…")

    def _show_files(self, files: RepoFiles) -> None:
        self._files = files
        self.files.setRowCount(0)
        for e in files.entries:
            row = self.files.rowCount()
            self.files.insertRow(row)
            parts = f" ({len(e.files)} parts)" if e.is_split else ""
            for col, text in enumerate((e.quant, _mb(e.size), e.name + parts)):
                self.files.setItem(row, col, QTableWidgetItem(text))
        gated = f", gated ({files.gated}): accept the licence on the website and set HF_TOKEN" if files.gated else ""
        self.status.setText(f"{files.repo}: licence {files.licence}{gated}; {len(files.entries)} GGUF files")

    def selected_entry(self) -> GGUFEntry | None:
        rows = self.files.selectionModel().selectedRows() if self.files.selectionModel() else []
        if not rows or self._files is None:
            return None
        return self._files.entries[rows[0].row()]

    def start_fit(self) -> None:
        entry, files = self.selected_entry(), self._files
        self.download_button.setEnabled(entry is not None)
        if entry is None or files is None:
            return
        request = fit.FitRequest(n_ctx=self.ctx.value(), n_gpu_layers=self.gpu_layers.value())

        def job(_report):
            header = remote_header(files.repo, entry.first.path)
            box = fit.machine(gpu_memory() if request.n_gpu_layers else None)
            return fit.estimate(header, request, box, file_size=entry.size)

        if self._run(job, self._show_fit):
            self.fit_label.setText("Reading the file's header…")

    def _show_fit(self, est: fit.FitEstimate) -> None:
        self.fit_label.setText(est.reason)
        self.status.setText("")

    def start_download(self) -> None:
        entry, files = self.selected_entry(), self._files
        if entry is None or files is None:
            return
        self._cancel.clear()
        cancel, dest = self._cancel, self._dest

        def job(report):
            return download_entry(files.repo, entry, dest, progress=report, cancel=cancel)

        if self._run(job, self._downloaded, self._show_progress):
            self.cancel_button.setEnabled(True)
            self.download_button.setEnabled(False)
            self.progress.setValue(0)
            self.progress.setVisible(True)
            self.status.setText(f"Downloading {entry.name}…")

    def _show_progress(self, p: DownloadProgress) -> None:
        self.progress.setValue(int(1000 * p.done_bytes / max(p.total_bytes, 1)))
        if p.stage == "verify":
            self.status.setText(f"{p.file}: verifying SHA-256…")
            return
        eta = f", {p.eta_s:.0f} s left" if p.eta_s is not None else ""
        part = f" (part {p.part_index}/{p.n_parts})" if p.n_parts > 1 else ""
        self.status.setText(f"{p.file}{part}: {_mb(p.done_bytes)} of {_mb(p.total_bytes)}, "
                            f"{p.bytes_per_s / 1e6:.1f} MB/s{eta}")

    def _downloaded(self, path: Path) -> None:
        self.progress.setValue(1000)
        self.download_button.setEnabled(True)
        self.ready_path = path
        self.status.setText(f"Ready to load: {path.name}")
        self.model_ready.emit(path)

    # -- closing ---------------------------------------------------------------------------
    def done(self, result: int) -> None:  # noqa: D401 - QDialog.done
        """Closing cancels a download (its partial file stays for a resume) and waits for the task."""
        self._cancel.set()
        if self._task is not None:
            self._task.wait()
        super().done(result)
