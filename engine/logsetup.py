"""The one logging set-up.

Every module logs through ``logging.getLogger(__name__)`` and never configures logging; each
entry point (``duet``, ``duet --self-check``, ``duet-cli`` and its subcommands, the scripts)
calls ``configure`` once before it does any work. Records go to standard error, one line each:
``LEVEL logger: message`` (the GUI adds the time, as its log spans a whole session).

llama.cpp's own log, which engine.llama.backend routes into logging under its module name, is chatty
and its error lines reach the user anyway inside the one-line errors they cause: it shows only
at DEBUG.
"""

from __future__ import annotations

import logging
import sys

FORMAT = "%(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
NATIVE = "engine.llama.backend"  # llama.cpp's log (engine.llama.backend)


class _Handler(logging.StreamHandler):
    """The handler ``configure`` installs (found again by its class when called twice)."""


def level_for(verbose: int) -> int:
    """The level for ``-v`` given ``verbose`` times: WARNING, then INFO, then DEBUG."""
    return (logging.WARNING, logging.INFO, logging.DEBUG)[min(max(verbose, 0), 2)]


def configure(level: int | str = logging.WARNING, *, timestamps: bool = False) -> None:
    """Log records at ``level`` (a number or one of LEVELS) and above to standard error.

    Called again, it changes the level and format. Where the host process already logs (pytest,
    an embedding program), its handlers and root level are left as they are."""
    level = logging.getLevelName(level) if isinstance(level, str) else level
    if not isinstance(level, int):
        raise ValueError(f"unknown log level {level!r} (one of {', '.join(LEVELS)})")
    root = logging.getLogger()
    ours = [h for h in root.handlers if isinstance(h, _Handler)]
    if ours or not root.handlers:
        handler = ours[0] if ours else _Handler(sys.stderr)
        handler.setFormatter(logging.Formatter(("%(asctime)s " if timestamps else "") + FORMAT))
        if not ours:
            root.addHandler(handler)
        root.setLevel(level)
    logging.getLogger(NATIVE).setLevel(logging.DEBUG if level <= logging.DEBUG else logging.ERROR)
    # gguf's SpecialVocab warns that a BERT writer has no key for a CLS token id (its CLS is its
    # BOS, written): engine.models.embedding_convert, at every fetch of the embedding model
    logging.getLogger("gguf.vocab").setLevel(max(level, logging.ERROR))
