"""A model file's identity: a bounded-I/O fingerprint of its bytes.

Fingerprint ``v1``: ``"v1:<size>:" + blake3(head ‖ tail ‖ size as u64 LE).hexdigest()`` where
head/tail are the first and last ``PROBE`` (8 MiB) bytes; a file of at most ``2 * PROBE`` bytes is
hashed whole, once. At most 16 MiB is read whatever the file size. Unlike some snapshot formats we
leave the mtime out: copying or restoring a model from a backup must not invalidate its chats.
A change confined to the middle of a large file is not detected; GGUF keeps its header, tensor
table and the first/last tensors in the probed ranges, and re-quantizing changes the size or both
ends, so this is accepted. Saved KV states (engine.conversation.session) and per-model settings
(engine.runtime.model_settings) are keyed by it.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from blake3 import blake3

from engine.errors import ModelLoadError

PROBE = 8 * 1024 * 1024
SCHEME = "v1"


def file_fingerprint(path: Path | str) -> str:
    """Fingerprint of the file at ``path`` (see the module docstring). Raises ModelLoadError."""
    path = Path(path)
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            hasher = blake3(max_threads=blake3.AUTO)
            buf = bytearray(min(PROBE, max(size, 1)))
            if size <= 2 * PROBE:
                _hash_range(f, 0, size, hasher, buf)
            else:
                _hash_range(f, 0, PROBE, hasher, buf)
                _hash_range(f, size - PROBE, PROBE, hasher, buf)
            hasher.update(struct.pack("<Q", size))
    except OSError as e:
        raise ModelLoadError(f"cannot read model file {path}: {e.strerror or e}") from e
    return f"{SCHEME}:{size}:{hasher.hexdigest()}"


def _hash_range(f: Any, start: int, length: int, hasher: Any, buf: bytearray) -> None:
    """Feed bytes [start, start+length) of ``f`` to ``hasher`` through the reusable ``buf``."""
    f.seek(start)
    view = memoryview(buf)
    left = length
    while left > 0:
        n = f.readinto(view[: min(left, len(buf))])
        if not n:
            raise OSError(f"the file shrank while being read ({left} bytes missing)")
        hasher.update(view[:n])
        left -= n


def fingerprint_size(fingerprint: str) -> int | None:
    """The file size recorded in a ``v1`` fingerprint, or None when it is not one."""
    parts = fingerprint.split(":")
    if len(parts) != 3 or parts[0] != SCHEME or not parts[1].isdigit():
        return None
    return int(parts[1])
