"""The status bar: speed, acceptance, tokens per target pass, drafter, context fill."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QStatusBar, QWidget

from engine.events import Stats


class StatusBar(QStatusBar):
    FIELDS = ("speed", "acceptance", "per_pass", "drafter", "context")
    TIPS = {
        "speed": "Generated tokens per second (last reply)",
        "acceptance": "Share of drafted tokens the target accepted",
        "per_pass": "Tokens produced per target model pass (1.0 without speculation)",
        "drafter": "Where drafts came from",
        "context": "Context used / total, in tokens",
    }

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.labels: dict[str, QLabel] = {}
        for name in self.FIELDS:
            label = QLabel(self)
            label.setToolTip(self.TIPS[name])
            self.addPermanentWidget(label)
            self.labels[name] = label
        self.clear_stats()

    def clear_stats(self) -> None:
        for name, text in (("speed", "— tok/s"), ("acceptance", "accepted —"),
                           ("per_pass", "— tok/pass"), ("drafter", "drafter —"),
                           ("context", "context —")):
            self.labels[name].setText(text)

    def set_drafter(self, name: str) -> None:
        self.labels["drafter"].setText(f"drafter {name}")

    def set_context(self, used: int, total: int) -> None:
        self.labels["context"].setText(f"context {used:,} / {total:,}")

    def show_stats(self, stats: Stats, n_past: int, n_ctx: int) -> None:
        self.labels["speed"].setText(f"{stats.tokens_per_s:.1f} tok/s")
        self.labels["acceptance"].setText(
            f"accepted {stats.acceptance_rate:.0%}" if stats.proposed else "accepted —")
        self.labels["per_pass"].setText(f"{stats.tokens_per_pass:.2f} tok/pass")
        used = ", ".join(k for k, v in stats.drafters_used.items() if v) or stats.drafter
        self.set_drafter(used)
        self.set_context(n_past, n_ctx)
