"""The enabled tools of a ToolHost as an Offer for tool rounds (engine.tools.rounds): function
names the model sees, and a call run on the server and tool the name stands for."""

from __future__ import annotations

import threading

from engine.chat import ToolCall
from engine.mcp.content import ToolResult
from engine.mcp.host import ToolHost
from engine.tools import Tool
from engine.tools.rounds import Offer


def offer(host: ToolHost) -> Offer:
    """What ``host`` offers now (one snapshot: later changes to the servers do not move it)."""
    box = host.toolbox()
    tools = tuple(Tool(f.function, f.tool.description, f.spec()["function"]["parameters"])
                  for f in box.tools)

    def run(call: ToolCall, cancel: threading.Event) -> ToolResult:
        where = box.resolve(call.name)
        if where is None:
            return ToolResult.error(f"no tool is named {call.name!r}")
        arguments = call.parsed_arguments()
        if not isinstance(arguments, dict):
            return ToolResult.error(f"{call.name}: the arguments are not a JSON object")
        return host.call(*where, arguments, cancel=cancel)

    return Offer(tools, run)
