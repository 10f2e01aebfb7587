"""An exception nobody caught (a bug in a slot, in a thread) is logged with its traceback and
shown as one line in the window, which goes on working (no model needed)."""

from __future__ import annotations

import logging
import sys
import threading

import pytest
from PySide6.QtWidgets import QPushButton

from app import crash
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # a safety net: as long as a test may run (tests/conftest.py)

LINE = ("Something went wrong inside Duet (ValueError: a bug in a slot); the details are in the "
        "log. The window goes on working.")


def logged(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "app.crash" and r.levelno == logging.ERROR]


@pytest.mark.qt_no_exception_capture  # the app's hook, not pytest-qt's, hears of it
@pytest.mark.logs_errors
def test_an_exception_in_a_slot_is_logged_and_shown_in_one_line(qtbot, home, caplog) -> None:
    from app.__main__ import create_window, parse_args

    window = create_window(parse_args(["--no-autoload"]))  # the app's startup installs the hook
    qtbot.addWidget(window)
    try:
        button = QPushButton("Boom", window)

        def boom() -> None:
            raise ValueError("a bug\nin a slot")

        button.clicked.connect(boom)
        button.click()
        qtbot.waitUntil(lambda: window.notice.text() == LINE, timeout=LONG_MS)
        [record] = logged(caplog)
        assert record.exc_info[0] is ValueError and record.exc_info[2] is not None  # the traceback
        assert window.notice.kind == "error"
        window.notice.hide()
        thread = threading.Thread(target=boom)
        thread.start()
        thread.join()
        qtbot.waitUntil(lambda: window.notice.text() == LINE, timeout=LONG_MS)
        assert len(logged(caplog)) == 2
    finally:
        window.crash.uninstall()
        window.close()
    assert sys.excepthook is not window.crash.hook


@pytest.mark.logs_errors
def test_a_harness_hook_installed_before_still_hears_of_it(qtbot, window) -> None:
    heard = []
    before = sys.excepthook
    sys.excepthook = lambda *exc: heard.append(exc[0])
    try:
        reporter = crash.install(window.notice.show_error, window)
        try:
            reporter.hook(KeyError, KeyError("k"), None)
        finally:
            reporter.uninstall()
    finally:
        sys.excepthook = before
    assert heard == [KeyError] and "KeyError" in window.notice.text()
