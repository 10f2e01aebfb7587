"""How much memory and disk the saved KV states may take: one declaration (rows of the
parameter table, engine.params) read by the command line, the settings and the server."""

from __future__ import annotations

from dataclasses import dataclass

from engine.cache.kv_store import DEFAULT_STORE_BYTES
from engine.cache.state_cache import DEFAULT_CACHE_BYTES
from engine.params import Params, param


@dataclass(frozen=True)
class CacheParams(Params):
    state_cache_mb: int = param(
        DEFAULT_CACHE_BYTES >> 20, "Conversation cache (MiB)", "Memory for the states of recent "
        "conversations and reply versions (and the local server's clients), so going back to "
        "one does not read it again (0: none).", applies="load", minimum=0, maximum=1 << 20,
        cli="--cache-mb", step=64)
    kv_store_mb: int = param(
        DEFAULT_STORE_BYTES >> 20, "Disk KV store (MiB)", "Disk space for the states of long "
        "prompts (attached documents, long system prompts), kept across restarts and shared "
        "by the window, the server and the command line (0: none).", applies="load", minimum=0,
        maximum=1 << 24, cli="--kv-store-mb", step=256)
