"""The library's long jobs in the window: imports (File → Import…, files dropped) and the
export of everything (File → Export everything…) run off the GUI thread (app.control.importing,
app.control.exporting), their progress and Cancel in the status bar."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QFileDialog

from app.control.exporting import Exporting
from app.control.importing import Importing
from app.views.job_progress import JobProgress

if TYPE_CHECKING:
    from app.views.main_window import MainWindow


def connect(window: MainWindow) -> Importing:
    progress = JobProgress(window)
    progress.setObjectName("importProgress")
    window.status.addWidget(progress)
    importing = Importing(window.controller.library, window.notice.show_message, parent=window)
    importing.progress.connect(progress.show_progress)
    importing.finished.connect(progress.end)
    progress.cancel_requested.connect(importing.cancel)
    window.sidebar.import_requested.connect(importing.start)
    window.sidebar.files_dropped.connect(window.take_files)
    window.exporting = Exporting(window.notice.show_message, parent=window)
    export_progress = JobProgress(window)
    export_progress.setObjectName("exportProgress")
    window.status.addWidget(export_progress)
    window.exporting.progress.connect(export_progress.show_progress)
    window.exporting.finished.connect(export_progress.end)
    export_progress.cancel_requested.connect(window.exporting.cancel)
    return importing


def export_everything(window: MainWindow) -> None:
    name, _ = QFileDialog.getSaveFileName(window, "Export every conversation",
                                          str(Path.home() / "duet-conversations.zip"),
                                          "Zip of Markdown and JSON (*.zip)")
    if name:
        window.exporting.start(Path(name))
