"""The settings dialog in the real window: the wheel scrolls the dialog and never changes a field
it passes over; the fields of every group line up; the local server says it applies at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QDoubleSpinBox, QLabel, QScrollArea, QWidget

from app.views.settings_dialog import RELOAD_MARK
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # a safety net: as long as a test may run (tests/conftest.py)

if TYPE_CHECKING:
    from pytestqt.qtbot import QtBot

    from app.views.main_window import MainWindow


def wheel(widget: QWidget, steps: int = -1) -> None:
    """One notch of the mouse wheel over the middle of ``widget`` (negative: down)."""
    at = QPointF(widget.rect().center())
    event = QWheelEvent(at, QPointF(widget.mapToGlobal(at.toPoint())), QPoint(),
                        QPoint(0, 120 * steps), Qt.MouseButton.NoButton,
                        Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def test_the_wheel_scrolls_the_dialog_not_the_field_under_it(qtbot: QtBot,
                                                             window: MainWindow) -> None:
    dialog = window.settings_dialog()
    qtbot.waitExposed(dialog, timeout=LONG_MS)
    field = dialog.editors["min_p"]
    assert isinstance(field, QDoubleSpinBox) and not field.hasFocus()
    bar = dialog.findChild(QScrollArea).verticalScrollBar()
    assert bar.maximum() > 0  # the dialog has something to scroll
    value, top = field.value(), bar.value()
    wheel(field)
    assert field.value() == value  # unchanged
    assert bar.value() > top  # the dialog scrolled instead
    field.setFocus()  # a field being edited takes the wheel
    qtbot.waitUntil(field.hasFocus, timeout=LONG_MS)
    wheel(field, +1)
    assert field.value() > value
    dialog.reject()


def test_the_fields_of_every_group_line_up(qtbot: QtBot, window: MainWindow) -> None:
    dialog = window.settings_dialog()
    qtbot.waitExposed(dialog, timeout=LONG_MS)
    lefts = {name: w.mapTo(dialog, QPoint(0, 0)).x() for name, w in dialog.editors.items()}
    assert len(set(lefts.values())) == 1, lefts
    dialog.reject()


def test_the_local_server_says_it_applies_at_once(qtbot: QtBot, window: MainWindow) -> None:
    dialog = window.settings_dialog()
    qtbot.waitExposed(dialog, timeout=LONG_MS)
    labels = {label.buddy() or label: label.text() for label in dialog.findChildren(QLabel)}
    server = [text for text in labels.values() if text.startswith("Local server")]
    assert server == ["Local server"] and RELOAD_MARK.strip() not in server[0]
    dialog.reject()


def test_exact_decoding_is_greyed_with_the_reason_where_it_cannot_hold(qtbot: QtBot,
                                                                       window: MainWindow,
                                                                       released) -> None:
    """On a build without the batch-invariant kernels the setting cannot keep its promise: the
    field is greyed and says why (issue 75). On the patched build, all on the CPU, it is not."""
    dialog = window.settings_dialog()
    qtbot.waitExposed(dialog, timeout=LONG_MS)
    field = dialog.editors["exact"]
    assert not field.isEnabled() and "lacks Duet's batch-invariant kernels" in field.toolTip()
    dialog.reject()


def test_exact_decoding_is_open_where_it_holds(qtbot: QtBot, window: MainWindow) -> None:
    dialog = window.settings_dialog()
    qtbot.waitExposed(dialog, timeout=LONG_MS)
    assert dialog.editors["exact"].isEnabled() and dialog.exact_note is None
    on_gpu = dialog.editors["exact_gpu"]  # (this build has no Vulkan GPU)
    assert not on_gpu.isEnabled() and "no Vulkan GPU" in on_gpu.toolTip()
    dialog.reject()
