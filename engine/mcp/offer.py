"""The enabled tools of a ToolHost as an ToolOffer for tool rounds (engine.runtime.tool_rounds): function
names the model sees, and a call run on the server and tool the name stands for."""

from __future__ import annotations

import threading

from engine.chat.messages import ToolCall
from engine.mcp.host import ToolHost
from engine.mcp.toolbox import Toolbox
from engine.runtime.tool_rounds import ToolOffer
from engine.tools import Tool
from engine.tools.calls import ToolResult, unknown


def offer(host: ToolHost) -> ToolOffer:
    """What ``host`` offers now (one snapshot: later changes to the servers do not move it)."""
    box = host.toolbox()
    tools = tools_of(box)

    def run(call: ToolCall, cancel: threading.Event) -> ToolResult:
        return call_tool(host, box, call, cancel)

    return ToolOffer(tools, run)


def tools_of(box: Toolbox) -> tuple[Tool, ...]:
    """The tools of ``box`` as a model is shown them."""
    return tuple(Tool(f.function, f.tool.description, f.spec()["function"]["parameters"])
                 for f in box.tools)


def call_tool(host: ToolHost, box: Toolbox, call: ToolCall, cancel: threading.Event) -> ToolResult:
    """Run ``call`` on the server and tool its function name stands for in ``box``."""
    where = box.resolve(call.name)
    if where is None:
        return unknown(call.name)
    arguments = call.parsed_arguments()
    if not isinstance(arguments, dict):
        return ToolResult.error(f"{call.name}: the arguments are not a JSON object")
    return host.call(*where, arguments, cancel=cancel)
