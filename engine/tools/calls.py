"""What a tool call gave, as the model reads it back (the window and the command line both)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gave: its text, whether it is an error, whether it was cut."""

    text: str
    is_error: bool = False
    truncated: bool = False

    @classmethod
    def error(cls, line: str) -> ToolResult:
        return cls(line, is_error=True)
