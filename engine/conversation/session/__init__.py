"""Saved conversations (``.duet`` files): text, settings and the KV states that reopen them at once.

``format`` reads and writes the file, ``meta`` is its metadata (the models and cache layout a
KV state belongs to included), ``fingerprint`` tells whether a saved KV state fits the models
there are now. ``meta`` imports neither of the others, and none of the three needs llama.cpp;
``probe`` binds a saved KV state to its transcript; ``store`` saves and opens through a
runtime and ``resume`` goes on with a saved conversation: those use llama.cpp.

May import: models, llama, decode, chat, runtime, conversation.tree, conversation.store.
"""

from engine.conversation.session.fingerprint import check_model, file_fingerprint, kv_layout
from engine.conversation.session.format import (
           MIGRATIONS,
           SUFFIX,
           LoadedSession,
           Problem,
           SectionInfo,
           inspect,
           read_meta,
           read_session,
           write_session,
)
from engine.conversation.session.meta import (
           FORMAT_VERSION,
           KVLayout,
           KVState,
           ModelInfo,
           Probe,
           SavedMessage,
           SessionMeta,
           utc_now_iso,
)

__all__ = ["FORMAT_VERSION", "MIGRATIONS", "SUFFIX", "KVLayout", "KVState", "LoadedSession",
           "SavedMessage", "ModelInfo", "Probe", "Problem", "SectionInfo", "SessionMeta", "check_model",
           "file_fingerprint", "inspect", "kv_layout", "read_meta", "read_session", "utc_now_iso",
           "write_session"]
