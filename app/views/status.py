"""The status bar: speed, acceptance, tokens per target pass, drafter, context fill on the right;
on the left one line, the passing message ("Reading the prompt: …") or else, while it runs, the
measurement of this machine's verify cost after a load. One label holds both, so two texts are
never drawn over each other, and a long one is cut rather than pushed under the figures."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QSizePolicy, QStatusBar, QWidget

from app.control.state import AppState
from engine.conversation.library import Library
from engine.conversation.tree import Conversation, Status
from engine.events import Stats


class StatusBar(QStatusBar):
    FIELDS = ("ahead", "speed", "acceptance", "per_pass", "drafter", "context", "server")
    MEASURING_TIP = ("Duet measures what a verification pass costs on this machine, once per "
                     "model and settings, between replies; speculative decoding drafts by it. "
                     "Until then replies are decoded plainly (the same text, without drafting).")
    TIPS = {
        "ahead": "Tokens of the message you are writing that the model has read already "
                 "(Settings → Conversations → Read while I type)",
        "speed": "Generated tokens per second (last reply)",
        "acceptance": "Share of drafted tokens the target accepted",
        "per_pass": "Tokens produced per target model pass (1.0 without speculation)",
        "drafter": "Where drafts came from",
        "context": "Context used / total, in tokens",
        "server": "The local OpenAI-compatible server's address (Settings → Local server)",
    }

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.labels: dict[str, QLabel] = {}
        self._n_ctx = 0
        self.note = QLabel(self)  # the passing message, else the measurement
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.addWidget(self.note, 1)
        self.measuring = ""  # the measurement's line while it runs
        self._message = ""
        self._expire = QTimer(self)
        self._expire.setSingleShot(True)
        self._expire.timeout.connect(self.clearMessage)
        for name in self.FIELDS:
            label = QLabel(self)
            label.setToolTip(self.TIPS[name])
            self.addPermanentWidget(label)
            self.labels[name] = label
        self.clear_stats()
        self.set_server(None)
        self.set_ahead(None)
        self.clear_measuring()

    def follow(self, library: Library) -> None:
        """Show the figures of the conversation shown, live while it streams."""
        def on_change(kind: str, conv: Conversation | None) -> None:
            if kind in ("current", "status") and conv is not None:
                self.show_status(conv.status)
        library.subscribe(on_change)

    def observe(self, state: AppState) -> None:
        """Follow the loaded model (drafter, context), the verify cost's measurement and the
        passing messages."""
        def on_change(what: str) -> None:
            if what == "model":
                self.clearMessage()  # "Loading…": done
                if state.model is not None:
                    self.set_drafter(state.model.drafter)
                    self.set_context(0, state.model.n_ctx)
                else:
                    self.clear_stats()
            elif what == "measuring":
                if state.measuring is None:
                    self.clear_measuring()
                else:
                    self.set_measuring(*state.measuring)
            elif what == "message":
                self.showMessage(*state.message)
            elif what == "typed_ahead":
                self.set_ahead(state.typed_ahead[0] if state.typed_ahead else None)
        state.subscribe(on_change)

    def show_status(self, status: Status) -> None:
        s = status.stats
        if s is None:
            for name, text in (("speed", "— tok/s"), ("acceptance", "accepted —"),
                               ("per_pass", "— tok/pass")):
                self.labels[name].setText(text)
        elif status.live:
            self.labels["speed"].setText(f"{s.tokens_per_s:.1f} tok/s")
            self.labels["acceptance"].setText(
                f"drafted {s.acceptance_rate:.0%}" if s.accepted else "accepted —")
            self.labels["per_pass"].setText("— tok/pass")
        else:
            self._show_final(s)
        if status.n_ctx:
            self.set_context(status.n_past, status.n_ctx)
        elif self._n_ctx:
            self.set_context(0, self._n_ctx)

    def clear_stats(self) -> None:
        for name, text in (("speed", "— tok/s"), ("acceptance", "accepted —"),
                           ("per_pass", "— tok/pass"), ("drafter", "drafter —"),
                           ("context", "context —")):
            self.labels[name].setText(text)

    def set_server(self, address: str | None) -> None:
        """The local server's base URL while it runs; nothing when it is off."""
        self.labels["server"].setText(f"server {address}" if address else "")
        self.labels["server"].setVisible(bool(address))

    def set_ahead(self, held: int | None) -> None:
        """Tokens of the prompt being typed read ahead; nothing once it is sent."""
        self.labels["ahead"].setText(f"read ahead: {held:,} tokens" if held else "")
        self.labels["ahead"].setVisible(bool(held))

    def clear_server(self) -> None:
        self.set_server(None)

    def showMessage(self, text: str, timeout: int | None = 0) -> None:  # noqa: N802 (Qt's name)
        """A passing message, for ``timeout`` ms (0: until the next one or clearMessage)."""
        self._message = text
        self._expire.stop()
        if timeout:
            self._expire.start(timeout)
        self._show_note()
        self.messageChanged.emit(text)

    def clearMessage(self) -> None:  # noqa: N802 (Qt's name)
        if self._message:
            self._message = ""
            self._expire.stop()
            self._show_note()
            self.messageChanged.emit("")

    def currentMessage(self) -> str:  # noqa: N802 (Qt's name)
        return self._message

    def set_measuring(self, done: int, total: int) -> None:
        """The verify cost is being measured: how far (``total`` 0: just started)."""
        share = f" {done / total:.0%}" if total else ""
        self.measuring = (f"Measuring this machine's speed for drafting{share} "
                          "(replies work meanwhile)")
        self._show_note()

    def clear_measuring(self) -> None:
        self.measuring = ""
        self._show_note()

    def _show_note(self) -> None:
        self.note.setText(self._message or self.measuring)
        self.note.setToolTip(self.MEASURING_TIP if self.measuring and not self._message else "")

    def set_drafter(self, name: str) -> None:
        self.labels["drafter"].setText(f"drafter {name}")

    def set_context(self, used: int, total: int) -> None:
        self._n_ctx = total
        self.labels["context"].setText(f"context {used:,} / {total:,}")

    def _show_final(self, stats: Stats) -> None:
        self.labels["speed"].setText(f"{stats.tokens_per_s:.1f} tok/s")
        self.labels["acceptance"].setText(
            f"accepted {stats.acceptance_rate:.0%}" if stats.proposed else "accepted —")
        self.labels["per_pass"].setText(f"{stats.tokens_per_pass:.2f} tok/pass")
        used = ", ".join(k for k, v in stats.drafters_used.items() if v) or stats.drafter
        self.set_drafter(used)
