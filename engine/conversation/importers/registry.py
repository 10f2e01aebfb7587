"""Which reader a record is for: each format's module says by ``sniff(record)``, first match
wins (the most specific shapes first). A reader is a module with ``NAME``, ``LABEL``,
``sniff`` and ``read``; adding a format is adding a module to READERS."""

from __future__ import annotations

import hashlib
import json
from types import ModuleType
from typing import Any

from engine.conversation.importers import chatgpt, claude, duet, llamacpp, lmstudio, openwebui
from engine.conversation.importers.base import Imported, ImportFailure, fail
from engine.conversation.importers.records import Markdown

READERS: tuple[ModuleType, ...] = (duet, chatgpt, claude, llamacpp, openwebui, lmstudio)
LABELS = {r.NAME: r.LABEL for r in READERS}


def reader_for(record: Any) -> ModuleType:
    for reader in READERS:
        if reader.sniff(record):
            return reader
    raise fail("it is not a conversation of a format Duet reads (ChatGPT, Claude, Open WebUI, "
               "LM Studio, llama.cpp web UI, Duet)")


def key_of(fmt: str, record: Any) -> str:
    """What makes an imported conversation the same one again: its format and a digest of the
    record as exported (the same file twice gives the same keys; a conversation exported again
    after it grew is a new one, so nothing of either is lost)."""
    try:
        blob = record.text if isinstance(record, Markdown) else json.dumps(
            record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        raise fail("it cannot be read as plain JSON") from None
    data = blob.encode("utf-8", "surrogatepass")
    return f"{fmt}:{hashlib.sha256(data).hexdigest()[:32]}"


def read_record(record: Any) -> tuple[Imported, str]:
    """(the conversation, its key); ImportFailure on anything the readers cannot use."""
    reader = reader_for(record)
    try:
        imported = reader.read(record)
    except ImportFailure:
        raise
    except RecursionError:
        raise fail("it is nested too deeply") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise fail(f"{LABELS[reader.NAME]} conversation with unexpected content "
                   f"({type(e).__name__}: {e})") from None
    return imported, key_of(reader.NAME, record)
