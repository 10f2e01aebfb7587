"""The library's long jobs in the window: imports (File → Import…, files dropped) run off the
GUI thread (app.control.importing), their progress and Cancel in the status bar."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    window.job_progress = progress
    return importing
