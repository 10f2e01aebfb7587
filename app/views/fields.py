"""Form fields for options and parameters: one editor per type, used by the settings dialog
and the preset editor alike, so both accept exactly what the option (and so the engine's
parameter table) accepts.

Spin boxes and combo boxes take the mouse wheel only when they have the keyboard focus: a
wheel turned over them while scrolling a form scrolls the form, never changes a value.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QApplication,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from app.control.settings import Option

INT_LIMIT = 2**31 - 1  # a QSpinBox holds a C int


class _WheelGuard(QObject):
    """Hands a wheel event over a field without focus to the scroll area the field is in (the
    form scrolls on), or to nobody; the field's value never changes."""

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if not isinstance(event, QWheelEvent) or not isinstance(obj, QWidget) or obj.hasFocus():
            return False
        area = obj.parentWidget()
        while area is not None and not isinstance(area, QAbstractScrollArea):
            area = area.parentWidget()
        if area is None:
            event.ignore()
            return True
        viewport = area.viewport()
        at = QPointF(obj.mapTo(viewport, event.position().toPoint()))
        QApplication.sendEvent(viewport, QWheelEvent(
            at, event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
            event.modifiers(), event.phase(), event.inverted(), event.source()))
        event.accept()
        return True


_GUARD = _WheelGuard()


def _guard(w: QWidget) -> None:
    w.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # focus by click or Tab, not by the wheel
    w.installEventFilter(_GUARD)


def _decimals(step: float) -> int:
    return max(2, len(f"{step:g}".partition(".")[2]))


def editor_for(option: Option, value: Any) -> QWidget:
    """A field showing ``value``, bounded as ``option`` is."""
    w: QWidget
    if option.type is bool:
        w = QCheckBox()
        w.setChecked(value)
    elif option.choices:
        w = QComboBox()
        w.addItems(list(option.choices))
        w.setCurrentText(value)
        _guard(w)
    elif option.type is int:
        w = QSpinBox()
        lo = -INT_LIMIT if option.minimum is None else max(int(option.minimum), -INT_LIMIT)
        hi = INT_LIMIT if option.maximum is None else min(int(option.maximum), INT_LIMIT)
        w.setRange(lo, hi)
        w.setSingleStep(max(1, int(option.step)))
        w.setValue(min(max(value, lo), hi))
        _guard(w)
    elif option.type is float:
        w = QDoubleSpinBox()
        w.setDecimals(_decimals(option.step))
        w.setSingleStep(option.step)
        low = option.minimum if option.minimum is not None else -1e9
        if option.param is not None and option.param.spec.exclusive_minimum:
            low += 10 ** -w.decimals()  # the smallest value above the bound the field can show
        w.setRange(low, option.maximum if option.maximum is not None else 1e9)
        w.setValue(value)
        _guard(w)
    else:
        w = QLineEdit()
        w.setText(value)
    w.setToolTip(option.description)
    w.setObjectName(option.name)
    return w


def editor_value(w: QWidget) -> Any:
    """The value a field holds, of its option's type."""
    if isinstance(w, QCheckBox):
        return w.isChecked()
    if isinstance(w, QComboBox):
        return w.currentText()
    if isinstance(w, QSpinBox):
        return w.value()
    if isinstance(w, QDoubleSpinBox):
        return round(w.value(), w.decimals())
    if isinstance(w, QLineEdit):
        return w.text()
    raise TypeError(f"no value in a {type(w).__name__}")


def set_editor_value(w: QWidget, value: Any) -> None:
    """Show ``value`` in a field made by ``editor_for``."""
    if isinstance(w, QCheckBox):
        w.setChecked(value)
    elif isinstance(w, QComboBox):
        w.setCurrentText(value)
    elif isinstance(w, (QSpinBox, QDoubleSpinBox)):
        w.setValue(value)
    elif isinstance(w, QLineEdit):
        w.setText(value)
    else:
        raise TypeError(f"cannot show a value in a {type(w).__name__}")
