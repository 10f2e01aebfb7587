"""The window in a process of its own, for the kill tests (tests/app/test_killed.py): it loads
the model its settings name, sends the message given, prints STREAMING once the reply shows
text, and runs as ``duet`` does (signals included) until it is killed or told to quit."""

from __future__ import annotations

import sys

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication


def main(message: str) -> int:
    from app.__main__ import create_window, parse_args
    from app.signals import QuitOnSignal

    window = create_window(parse_args([]))
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    quit_on_signal = QuitOnSignal(app, window.controller.checkpoint_all, window)  # noqa: F841 - held
    state = {"sent": False, "said": False}

    def tick() -> None:
        c = window.controller
        if not state["sent"] and window.state.model is not None:
            c.send(message)
            state["sent"] = True
        elif state["sent"] and not state["said"] and c.current is not None and \
                c.current.turns and c.current.turns[-1].text:
            print("STREAMING", flush=True)
            state["said"] = True

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(20)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
