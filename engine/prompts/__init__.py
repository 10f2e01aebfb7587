"""From a request to a prompt: ``prepare`` turns a chat (messages, tools, grammar, attached files)
into a prepared turn, and ``Reader`` turns a reply's events into text, calls and the end.

May import: models, llama, cache, decode, chat, tools, documents, vision."""
