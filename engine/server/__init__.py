"""An OpenAI-compatible local HTTP server over one Duet runtime (``duet-cli serve``).

May import: models, llama, cache, decode, chat, tools, documents, prompts, runtime, audio, vision.
"""
