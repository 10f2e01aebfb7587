"""The dialects the server speaks, one folder each; each reads its requests into the engine's
chat (engine.chat), runs the turn through the served model (engine.server.core) and shapes the
events back its way:

- ``openai``: Chat Completions and Completions, and the Responses API;
- ``anthropic``: Messages, and counting a prompt's tokens;
- ``ollama``: chat and generate, and the model routes (tags, ps, show).

May import: chat, tools, decode, models, llama, runtime, server.core, server.errors, server.turn,
server.images, server.schema.
"""
