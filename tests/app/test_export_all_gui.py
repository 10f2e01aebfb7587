"""File → Export everything…: the zip is written off the GUI thread, one line says how it went,
and an export that cannot be written is one line that leaves no zip."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from app.views.job_progress import JobProgress
from engine.conversation.archive import MANIFEST
from engine.conversation.importers.run import import_files
from tests.conftest import REPLY_WAIT_S

DATA = Path(__file__).resolve().parents[1] / "data" / "imports"
LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def export(qtbot, window, dest: Path):
    with qtbot.waitSignal(window.exporting.finished, timeout=LONG_MS) as done:
        assert window.exporting.start(dest)
    return done.args[0]


def test_export_everything_from_the_window(qtbot, window, tmp_path):
    import_files(sorted(DATA.glob("*.json")))
    report = export(qtbot, window, tmp_path / "backup")
    assert report.written == 8 and report.path == tmp_path / "backup.zip"
    assert window.notice.text() == "Exported 8 conversations to backup.zip."
    with zipfile.ZipFile(tmp_path / "backup.zip") as zf:
        assert len(json.loads(zf.read(MANIFEST))["conversations"]) == 8
    assert window.findChild(JobProgress, "exportProgress").isHidden()


def test_an_export_that_cannot_be_written(qtbot, window, tmp_path):
    import_files([DATA / "claude-conversations.json"])
    (tmp_path / "taken.zip").mkdir()
    assert export(qtbot, window, tmp_path / "taken.zip") is None
    assert window.notice.text().startswith("Cannot write taken.zip: ")
    assert window.notice.kind == "error" and "\n" not in window.notice.text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "settings.json", "taken.zip"]
