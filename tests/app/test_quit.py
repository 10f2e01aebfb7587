"""Quitting asks when it would interrupt something (a reply being written, an unsent message),
and an unsent message is back in the composer at the next start."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMessageBox

from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def answer(window, button: str, asked: list[str]) -> list[bool]:
    """Answer the quit question, if one is open, with ``button`` (as the user clicks it).
    The list returned gets an item once the answer has looked (whether or not it clicked)."""
    looked: list[bool] = []

    def click() -> None:
        box = next((b for b in window.findChildren(QMessageBox, "quit-question") if b.isVisible()),
                   None)
        looked.append(box is not None)
        if box is None:
            return
        asked.append(box.text())
        next(b for b in box.buttons() if b.text().replace("&", "") == button).click()

    QTimer.singleShot(0, click)
    return looked


def test_an_idle_window_quits_without_asking(qtbot, window, settings) -> None:
    asked: list[str] = []
    looked = answer(window, "Cancel", asked)
    assert window.close()
    qtbot.waitUntil(lambda: bool(looked), timeout=LONG_MS)  # the answer ran: no question was open
    assert looked == [False] and asked == []
    assert not window.isVisible() and settings["composer_draft"] == ""


def test_an_unsent_message_asks_and_is_back_at_the_next_start(qtbot, window, settings) -> None:
    from app.views.main_window import MainWindow

    qtbot.keyClicks(window.composer.edit, "half a thought")
    asked: list[str] = []
    answer(window, "Cancel", asked)
    assert not window.close()  # the person cancels: nothing changes
    assert len(asked) == 1 and "unsent message" in asked[0]
    assert window.isVisible() and window.composer.edit.toPlainText() == "half a thought"
    answer(window, "Quit", asked)
    assert window.close()
    assert len(asked) == 2 and not window.isVisible()
    assert settings["composer_draft"] == "half a thought"
    again = MainWindow(settings, autoload=False)  # the next start
    qtbot.addWidget(again, before_close_func=lambda w: w.composer.edit.clear())
    assert again.composer.edit.toPlainText() == "half a thought"


def test_a_reply_being_written_asks(qtbot, window, driver, smol_path, settings, held_replies) -> None:
    settings.set("max_tokens", 400)
    driver.load(smol_path)
    window.controller.send("Write a very long story about the sea.")
    qtbot.waitUntil(lambda: len(window.controller.current.turns[-1].text) > 10, timeout=LONG_MS)
    asked: list[str] = []
    answer(window, "Cancel", asked)
    assert not window.close()
    assert len(asked) == 1 and "reply is being written" in asked[0]
    assert "unsent" not in asked[0]
    assert window.controller.generating is not None  # it goes on
    answer(window, "Quit", asked)
    assert window.close() and len(asked) == 2 and not window.isVisible()
