"""Duet's inference engine: llama.cpp contexts driven through llama-cpp-python's low-level API.

This package never imports Qt; the GUI (``app``) consumes the engine's event stream.
"""


def version() -> str:
    """Duet's version: the installed package's, or "0" when run from a source tree not installed."""
    import importlib.metadata  # lazy: ~27 ms of import (email, csv, zipfile) only where a version is shown

    try:
        return importlib.metadata.version("duet")
    except importlib.metadata.PackageNotFoundError:
        return "0"
