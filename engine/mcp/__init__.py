"""Tools through the Model Context Protocol, on the official ``mcp`` SDK (no Qt here).

``config``: the servers the person added (``mcp.json``); ``interchange``: the ``mcpServers``
JSON of other apps; ``host``: the servers running on one background loop, with a synchronous
API; ``toolbox``: the enabled tools as function specs for a model; ``content``: results as
bounded plain text.

May import: models, llama, cache, decode, chat, tools, documents, prompts, runtime.
"""

from engine.mcp.config import McpConfig, ServerConfig, ToolConfigError, mask
from engine.mcp.host import HostLimits, ServerStatus, ToolHost
from engine.mcp.toolbox import FunctionTool, Toolbox, ToolInfo
from engine.tools.calls import ToolResult

__all__ = ["FunctionTool", "HostLimits", "McpConfig", "ServerConfig", "ServerStatus", "ToolConfigError",
           "ToolHost", "ToolInfo", "ToolResult", "Toolbox", "mask"]
