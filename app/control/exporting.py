"""Export everything from the window (File → Export everything…): every saved conversation in
one zip of Markdown and JSON with a manifest (engine.conversation.archive), written off the GUI
thread (app.control.background), its progress for the status bar and one line at its end.
QtCore only."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject

from app.control.background import JobCancelled, JobFailed, LibraryJob, Notify, Report
from engine import paths
from engine.conversation.archive import ExportProgress, ExportReport, export_all


def summary(report: ExportReport) -> tuple[str, str]:
    n = report.written
    line = f"Exported {n} conversation{'' if n == 1 else 's'} to {report.path.name}"
    if not report.failed:
        return line + ".", "info"
    more = f" (and {len(report.failed) - 1} more)" if len(report.failed) > 1 else ""
    return f"{line}; left out {report.failed[0]}{more}", "error"


class Exporting(LibraryJob):
    """``start(dest)``; ``progress`` carries (share done, a line), ``finished`` the ExportReport
    (None: cancelled or failed; no zip is left then)."""

    def __init__(self, notify: Notify, folder: Path | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__("export", notify, folder, parent)

    def start(self, dest: Path) -> bool:
        dest = Path(dest)
        if dest.suffix.lower() != ".zip":
            dest = dest.with_name(dest.name + ".zip")
        folder = self.folder or paths.conversations_dir()
        if self.job.busy:
            self.notify("An export is under way.", "error")
            return False

        def job(report: Report) -> ExportReport | JobFailed:
            try:
                return export_all(dest, folder, progress=report)
            except OSError as e:  # (a disk full, a folder not writable: no zip is left)
                return JobFailed(f"Cannot write {dest.name}: {e.strerror or e}")

        self.progress.emit(0.0, f"Exporting to {dest.name}…")
        return self.job.start(job)

    def _on_progress(self, p: object) -> None:
        if isinstance(p, ExportProgress) and p.total:
            self.progress.emit(p.done / p.total, f"Exporting {p.done} of {p.total} conversations")

    def _on_done(self, result: object) -> None:
        if isinstance(result, ExportReport):
            self.notify(*summary(result))
            self.finished.emit(result)
            return
        if isinstance(result, JobCancelled):
            self.notify("Export cancelled; no zip was written.", "info")
        elif isinstance(result, JobFailed):
            self.notify(result.line, "error")
        self.finished.emit(None)
