"""The local HTTP server (OpenAI, Anthropic and Ollama dialects) over the models of one pool
(engine.runtime.pool): ``duet-cli serve``'s, or the window's for its *Local server*.

May import: models, llama, cache, decode, chat, tools, documents, prompts, runtime, audio, vision.
"""
