"""A QFileOpenEvent (how macOS passes a double-clicked .duet) opens the conversation."""

from pathlib import Path

from PySide6.QtGui import QFileOpenEvent
from PySide6.QtWidgets import QApplication


def test_file_open_event_reaches_the_controller(qtbot, monkeypatch, tmp_path):
    from app.__main__ import create_window, parse_args

    opened = []
    window = create_window(parse_args(["--no-autoload"]))
    qtbot.addWidget(window)
    monkeypatch.setattr(window.controller.files, "open_path", opened.append)
    target = tmp_path / "chat.duet"
    QApplication.sendEvent(QApplication.instance(), QFileOpenEvent(str(target)))
    assert opened == [Path(target)]
