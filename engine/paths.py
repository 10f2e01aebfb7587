"""Where Duet keeps its files (platformdirs): models, conversations, settings, caches.

``DUET_HOME`` overrides all of them with one folder (used by tests and the packaged self-check).
"""

import os
from pathlib import Path

import platformdirs

APP = "duet"


def _root(kind: str) -> Path | None:
    home = os.environ.get("DUET_HOME")
    return Path(home) / kind if home else None


def data_dir() -> Path:
    return _root("data") or Path(platformdirs.user_data_dir(APP, appauthor=False))


def models_dir() -> Path:
    override = os.environ.get("DUET_MODELS_DIR")
    return Path(override) if override else data_dir() / "models"


def conversations_dir() -> Path:
    return data_dir() / "conversations"


def config_dir() -> Path:
    return _root("config") or Path(platformdirs.user_config_dir(APP, appauthor=False))


def cache_dir() -> Path:
    return _root("cache") or Path(platformdirs.user_cache_dir(APP, appauthor=False))


def kv_store_dir() -> Path:
    """The disk KV store (engine.cache.kv_store), shared by the window, the server and the CLI
    (``DUET_KV_DIR`` overrides it: each test has its own)."""
    override = os.environ.get("DUET_KV_DIR")
    return Path(override) if override else cache_dir() / "kv"
