"""Screenshots of a tool call in the real window: waiting for the person, then its result.

``QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/screenshot_tools.py docs/screenshots/tool``
writes ``tool-call.png`` and ``tool-result.png``: a fresh home, the starter 1.5B, the tests'
MCP server (its ``add`` tool only), greedy. Needs the models of ./test.sh.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ANSWER = "You are a helpful assistant. When a tool result arrives, answer the user with it."


def main(prefix: str) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.path.insert(0, str(REPO))
    from engine import paths

    os.environ.setdefault("DUET_MODELS_DIR", str(paths.models_dir()))
    home = Path(tempfile.mkdtemp())
    os.environ["DUET_HOME"] = str(home)
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    from app.control.settings import Settings
    from app.views.main_window import MainWindow
    from app.views.tool_turns import ToolTurnWidget
    from app.views.tools_panel import Tools
    from engine.mcp import McpConfig, ServerConfig, ToolHost
    from tests.conftest import model_path
    from tests.engine.mcp.mcp_servers import stdio_args

    app = QApplication([])

    def spin(done: Callable[[], bool], timeout_s: float = 300) -> None:
        end = time.monotonic() + timeout_s
        while not done() and time.monotonic() < end:
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)

    def settle() -> None:
        for _ in range(10):
            app.processEvents()

    settings = Settings(home / "settings.json")
    settings.update({"temperature": 0.0, "max_tokens": 80, "drafter": "none", "autosave": False,
                     "theme": "light", "system_prompt": ANSWER})
    window = MainWindow(settings, autoload=False)
    window.resize(1000, 720)
    window.show()
    tools = Tools(window, path=home / "mcp.json", host=ToolHost())
    command, *args = stdio_args("friendly")
    off = frozenset({"echo", "picture", "env", "pid", "gate"})
    tools.set_config(McpConfig((ServerConfig.stdio("friendly", command, args, disabled_tools=off),)))
    spin(lambda: tools.host.status("friendly").state == "ready")
    window.load_models(model_path("target"), None)
    spin(lambda: window.model_info is not None)
    window.controller.send("Use the add tool to add 2 and 3.")
    conv = window.controller.current
    spin(lambda: any(t.role == "tool" and t.ask for t in conv.turns))
    settle()
    window.grab().save(prefix + "-call.png")
    widget = next(w for w in window.chat_view.widgets if isinstance(w, ToolTurnWidget))
    widget.buttons["once"].click()
    spin(lambda: window.controller.generating is None)
    widget.fold_button.setChecked(True)
    settle()
    window.grab().save(prefix + "-result.png")
    window.ask_to_quit = lambda why: True
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
