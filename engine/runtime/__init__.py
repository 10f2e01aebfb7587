"""The engine assembled: models, contexts and the one scheduler from one frozen configuration
(runtime), driven on the caller's thread (generate, tool_rounds) or on a thread of its own (service);
the loaded models of a process in one pool (pool), which says who decodes when (cores).

May import: models, llama, cache, decode, chat, tools, documents, prompts."""
