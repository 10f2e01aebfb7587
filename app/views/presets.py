"""The preset bar above the composer (the conversation's preset) and the preset editor.

The bar follows the conversation model: it shows the preset of the conversation shown and
emits ``chosen(Preset)`` when the user picks another; the controller applies it to that
conversation only. The editor edits one preset at a time, with a multi-line system prompt.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.control.settings import OPTIONS
from app.views.fields import editor_for, editor_value, set_editor_value
from engine.conversation.library import Library
from engine.conversation.presets import SAMPLING_FIELDS, Preset, find, load_presets, save_presets
from engine.conversation.tree import Conversation
from engine.decode.sampling import SamplingParams

NONE_LABEL = "Settings (no preset)"


class PresetBar(QWidget):
    chosen = Signal(object)  # Preset

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.presets: list[Preset] = load_presets()
        self.combo = QComboBox(self)
        self.combo.setToolTip("The preset of this conversation: system prompt and sampling")
        self.combo.activated.connect(self._on_activated)
        edit = QPushButton("Edit…", self)
        edit.setToolTip("Edit the presets")
        edit.clicked.connect(self.edit_dialog)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 4, 12, 0)
        layout.addWidget(QLabel("Preset:", self))
        layout.addWidget(self.combo)
        layout.addWidget(edit)
        layout.addStretch(1)
        self._current: str | None = None
        self._fill()

    def follow(self, library: Library) -> None:
        def on_change(kind: str, conv: Conversation | None) -> None:
            if kind in ("current", "meta") and conv is not None:
                self.show_preset(conv.preset)
        library.subscribe(on_change)

    def show_preset(self, name: str | None) -> None:
        self._current = name
        index = self.combo.findText(name) if name else 0
        self.combo.setCurrentIndex(max(index, 0))

    def _fill(self) -> None:
        self.combo.clear()
        self.combo.addItem(NONE_LABEL)
        for p in self.presets:
            self.combo.addItem(p.name)
        self.show_preset(self._current)

    def _on_activated(self, index: int) -> None:
        preset = self.presets[index - 1] if index > 0 else None
        if preset is not None:
            self.chosen.emit(preset)

    def edit_dialog(self) -> PresetDialog:
        dialog = PresetDialog(self.presets, find(self.presets, self._current), self)
        dialog.saved.connect(self._on_saved)
        dialog.open()
        return dialog

    def _on_saved(self, presets: list[Preset]) -> None:
        self.presets = presets
        self._fill()


class PresetDialog(QDialog):
    """Edit, add or delete presets; ``saved(list[Preset])`` after they were written."""

    saved = Signal(object)

    def __init__(self, presets: list[Preset], start: Preset | None = None,
                 parent: QWidget | None = None, defaults: SamplingParams = SamplingParams()
                 ) -> None:
        """``defaults``: the sampling a new preset starts from (the settings')."""
        super().__init__(parent)
        self.setWindowTitle("Presets")
        self.presets = list(presets)
        self.defaults = defaults
        self.picker = QComboBox(self)
        self.picker.currentIndexChanged.connect(self._show)
        add = QPushButton("New", self)
        add.clicked.connect(self._add)
        delete = QPushButton("Delete", self)
        delete.clicked.connect(self._delete)
        top = QHBoxLayout()
        top.addWidget(self.picker, 1)
        top.addWidget(add)
        top.addWidget(delete)
        self.name = QLineEdit(self)
        self.system = QPlainTextEdit(self)
        self.system.setPlaceholderText("The system prompt (several lines are fine)")
        self.system.setMinimumHeight(120)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("System prompt", self.system)
        # every sampling parameter and the drafter, as the settings show them (nothing hidden)
        self.fields: dict[str, QWidget] = {}
        for name in (*SAMPLING_FIELDS, "drafter"):
            option = OPTIONS[name]
            w = editor_for(option, option.default)
            self.fields[name] = w
            label = QLabel(option.label + (" (none: at once; others at the next load)"
                                           if name == "drafter" else ""))
            label.setToolTip(option.description)
            form.addRow(label, w)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel, parent=self)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(form)
        layout.addWidget(buttons)
        self._index = -1
        self._refill(self.presets.index(start) if start in self.presets else 0)

    def _refill(self, index: int) -> None:
        self.picker.blockSignals(True)
        self.picker.clear()
        self.picker.addItems([p.name for p in self.presets])
        self.picker.blockSignals(False)
        self._index = -1
        if self.presets:
            self.picker.setCurrentIndex(min(index, len(self.presets) - 1))
            self._show(self.picker.currentIndex())

    def _show(self, index: int) -> None:
        self._keep()
        if not 0 <= index < len(self.presets):
            return
        p = self.presets[index]
        self._index = index
        self.name.setText(p.name)
        self.system.setPlainText(p.system_prompt)
        for name, w in self.fields.items():
            set_editor_value(w, p.drafter if name == "drafter" else getattr(p.sampling, name))

    def _keep(self) -> None:
        """Store the fields into the preset being edited."""
        if not 0 <= self._index < len(self.presets):
            return
        values = {name: editor_value(w) for name, w in self.fields.items()}
        drafter = values.pop("drafter")
        self.presets[self._index] = replace(
            self.presets[self._index], name=self.name.text().strip(),
            system_prompt=self.system.toPlainText().strip(), drafter=drafter,
            sampling=replace(self.presets[self._index].sampling, **values))

    def _add(self) -> None:
        self._keep()
        names = {p.name for p in self.presets}
        n = 1
        while f"Preset {n}" in names:
            n += 1
        self.presets.append(Preset(f"Preset {n}", sampling=self.defaults))
        self._refill(len(self.presets) - 1)

    def _delete(self) -> None:
        if 0 <= self._index < len(self.presets):
            del self.presets[self._index]
            self._refill(self._index)

    def _save(self) -> None:
        self._keep()
        names = [p.name for p in self.presets]
        try:
            if len(set(names)) != len(names):
                raise ValueError("two presets have the same name")
            save_presets(self.presets)
        except (ValueError, OSError) as e:
            QMessageBox.warning(self, "Presets", f"Cannot save the presets: {e}")
            return
        self.saved.emit(list(self.presets))
        self.accept()
