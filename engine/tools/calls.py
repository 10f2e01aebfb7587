"""One answer for a tool call, wherever it runs: what the model reads back when a call is refused,
cancelled, names no tool or crashes, and the one way to run a call that never raises. The window
(app.control.tool_flow) and the command line (engine.runtime.tool_rounds) both answer through it,
so the same call gets the same words in either.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from engine.chat.messages import ToolCall

log = logging.getLogger(__name__)

REFUSED = "The person did not allow this call."
CANCELLED = "The call was cancelled."


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gave: its text, whether it is an error, whether it was cut."""

    text: str
    is_error: bool = False
    truncated: bool = False

    @classmethod
    def error(cls, line: str) -> ToolResult:
        return cls(line, is_error=True)


def refused() -> ToolResult:
    return ToolResult.error(REFUSED)


def cancelled() -> ToolResult:
    return ToolResult.error(CANCELLED)


def unknown(name: str) -> ToolResult:
    """A call of a function no tool is named by."""
    return ToolResult.error(f"There is no tool named {name!r}.")


def crashed(name: str, e: BaseException | None = None) -> ToolResult:
    """A call whose runner broke (a bug, not the tool's own error result)."""
    return ToolResult.error(f"{name}: the call failed" + (f" ({type(e).__name__})" if e is not None else "") + ".")


Runner = Callable[[ToolCall, threading.Event], ToolResult]


def run_call(run: Runner, call: ToolCall, cancel: threading.Event) -> ToolResult:
    """Run ``call`` with ``run`` and always end in a result: a runner that raises gives
    ``crashed``, a call stopped by ``cancel`` gives ``cancelled`` whatever came back."""
    try:
        result = run(call, cancel)
    except Exception as e:  # noqa: BLE001 - a call must always end in a result
        log.exception("the tool call %s failed unexpectedly", call.name)
        result = crashed(call.name, e)
    return cancelled() if cancel.is_set() else result
