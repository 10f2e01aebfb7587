"""The settings dialog, generated from the schema: one field per visible option, by group
(app.views.fields makes the fields), the fields of every group in one column.

Options that apply at the next model load are marked with a ⟳ and listed after OK, so the
user knows a reload is needed; the others apply at once.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.control.settings import SCHEMA, Settings
from app.views.fields import editor_for, editor_value
from engine.llama.exactness import exactness, vulkan_exact_possible

RELOAD_MARK = " ⟳"


class SettingsDialog(QDialog):
    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Duet settings")
        self.settings = settings
        self.editors: dict[str, QWidget] = {}
        self.changed: list[str] = []
        self.exact_note: str | None = None  # why exact decoding cannot hold here, if it cannot
        inner = QWidget()
        column = QVBoxLayout(inner)
        groups: dict[str, QFormLayout] = {}
        for option in SCHEMA:
            if not option.visible:
                continue
            if option.group not in groups:
                box = QGroupBox(option.group, inner)
                groups[option.group] = QFormLayout(box)
                column.addWidget(box)
            w = editor_for(option, settings[option.name])
            label = QLabel(option.label + (RELOAD_MARK if option.applies == "reload" else ""))
            label.setToolTip(option.description)
            groups[option.group].addRow(label, w)
            self.editors[option.name] = w
        self._align([form for form in groups.values()])
        self._say_where_exact_cannot_hold()
        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        scroll.setWidget(inner)
        note = QLabel(f"{RELOAD_MARK.strip()} applies at the next model load; "
                      "everything else applies at once.", self)
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel
                                   | QDialogButtonBox.StandardButton.RestoreDefaults, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).clicked.connect(
            self.restore_defaults)
        layout = QVBoxLayout(self)
        layout.addWidget(scroll, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(note, 1)
        layout.addLayout(bottom)
        layout.addWidget(buttons)
        self.resize(520, 640)

    @staticmethod
    def _align(forms: list[QFormLayout]) -> None:
        """One label column for all the groups, so that their fields line up."""
        items = [form.itemAt(row, QFormLayout.ItemRole.LabelRole)
                 for form in forms for row in range(form.rowCount())]
        labels = [w for w in (item.widget() for item in items if item is not None) if w is not None]
        width = max((label.sizeHint().width() for label in labels), default=0)
        for label in labels:
            label.setMinimumWidth(width)
        for form in forms:
            form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
            form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)

    def _say_where_exact_cannot_hold(self) -> None:
        """Exact decoding greyed, with the reason, where this build or these GPU layers cannot
        keep it (engine.llama.exactness): the setting would promise what the replies break. And
        exact on a Vulkan GPU greyed where there is none with Duet's batch-invariant mode."""
        on_gpu = self.editors.get("exact_gpu")
        if on_gpu is not None and not vulkan_exact_possible():
            on_gpu.setEnabled(False)
            on_gpu.setToolTip("Not here: no Vulkan GPU with Duet's batch-invariant mode "
                              "in this build.")
        editor = self.editors.get("exact")
        if editor is None:
            return
        kv = str(self.settings["type_k"])
        why = exactness(True, int(self.settings["gpu_layers_target"]), (kv, kv),
                        bool(self.settings["exact_gpu"])).reason
        if why is None:
            return
        editor.setEnabled(False)
        editor.setToolTip(f"Not exact here: {why}.")
        self.exact_note = why

    def values(self) -> dict[str, Any]:
        return {name: editor_value(w) for name, w in self.editors.items()}

    def restore_defaults(self) -> None:
        for option in SCHEMA:
            if option.name in self.editors:
                old = self.editors[option.name]
                new = editor_for(option, option.default)
                parent = old.parentWidget()
                form = parent.layout() if parent is not None else None
                if form is not None:
                    form.replaceWidget(old, new)
                old.deleteLater()
                self.editors[option.name] = new

    def accept(self) -> None:
        self.changed = self.settings.update(self.values())
        super().accept()
