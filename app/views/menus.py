"""The window's menu bar: File, Conversation, Model, Settings and Help, each entry a request to a
controller or a dialog."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QMessageBox

from app.views import file_dialogs, library_jobs
from app.views.tools_panel import open_tools_dialog

if TYPE_CHECKING:
    from app.views.main_window import MainWindow


def build(window: MainWindow) -> None:
    c = window.controller
    bar = window.menuBar()
    file = bar.addMenu("&File")
    _action(file, "&New conversation", c.new, QKeySequence.StandardKey.New)
    _action(file, "&Open…", lambda: file_dialogs.open_conversation(window),
            QKeySequence.StandardKey.Open)
    window.recent_menu = file.addMenu("Open &recent")
    window.recent_menu.aboutToShow.connect(lambda: file_dialogs.fill_recent(window))
    _action(file, "&Save", lambda: c.files.save(), QKeySequence.StandardKey.Save)
    _action(file, "Save &as…", lambda: file_dialogs.save_as(window),
            QKeySequence.StandardKey.SaveAs)
    file.addSeparator()
    _action(file, "&Import…", lambda: file_dialogs.import_exports(window))
    _action(file, "&Export everything…", lambda: library_jobs.export_everything(window))
    file.addSeparator()
    _action(file, "&Quit", window.close, QKeySequence.StandardKey.Quit)
    conv = bar.addMenu("&Conversation")
    _action(conv, "&Rename…", lambda: file_dialogs.rename(window, c.current.id if c.current else None),
            QKeySequence("F2"))
    _action(conv, "&Delete", lambda: file_dialogs.delete(window))
    _action(conv, "&Export the branch shown…", lambda: file_dialogs.export_shown(window))
    _action(conv, "&Find…", window.sidebar.search.setFocus, QKeySequence.StandardKey.Find)
    _action(conv, "New &project…", lambda: window.sidebar.projects.ask_new()
            if window.sidebar.projects is not None else None)
    _action(conv, "S&top the reply or tool call", c.stop, QKeySequence("Esc"))
    model = bar.addMenu("&Model")
    _action(model, "Choose &target model…", lambda: window.browse_model(False))
    _action(model, "Choose &draft model…", lambda: window.browse_model(True))
    _action(model, "&Load / reload", window.flow.reload, QKeySequence("Ctrl+R"))
    _action(model, "&Fetch the starter models…", window.flow.fetch_starters)
    settings = bar.addMenu("&Settings")
    _action(settings, "&Preferences…", window.settings_dialog, QKeySequence("Ctrl+,"))
    _action(settings, "&Tools (MCP servers)…", lambda: open_tools_dialog(window))
    _action(settings, "&Measure the verification cost again", window.flow.recalibrate)
    help_ = bar.addMenu("&Help")
    _action(help_, "&About Duet", lambda: QMessageBox.about(
        window, "About Duet", "Duet: a desktop chat for local GGUF models, with speculative "
        "decoding and conversations that reopen instantly."))


def _action(menu: QMenu, text: str, slot: Callable[[], object],
            shortcut: QKeySequence | QKeySequence.StandardKey | None = None) -> QAction:
    action = menu.addAction(text)
    action.triggered.connect(lambda _checked=False: slot())
    if shortcut is not None:
        action.setShortcut(shortcut)
    return action
