"""Memory of what was read: where a cache and a prompt agree (prefix), recent KV states in memory
(state_cache), long prompts' states on disk (kv_store), and how much of each (params).

May import: llama."""
