"""The engine assembled: models, contexts and the one scheduler from one frozen configuration
(runtime), driven on the caller's thread (generate, tool_rounds) or on a thread of its own (service).

May import: models, llama, cache, decode, chat, tools, documents, prompts."""
