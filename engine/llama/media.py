"""Images in a token sequence: each position an image takes holds a placeholder id.

A context's mirror (``LlamaSequence.tokens``) is a list of ints, and everything that reuses a cache
(prefix matching, sequence removal, the state cache, the disk KV store, ``.duet`` files) compares
those lists. An image's positions hold ids derived from the image's content hash and the row,
outside the vocabulary (at or above ``MEDIA_BASE``, below 2**32: they are stored as u32 like
any token), so the same picture gives the same ids in every conversation and process, and two
different pictures differ at every row. ``LlamaSequence.decode`` reads the embedding row behind each
id from the model's projector (engine.llama.projector).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

MEDIA_BASE = 1 << 31  # every vocabulary is far smaller; ids up to 2**32 - 1 fit a u32


def is_media(token: int) -> bool:
    return token >= MEDIA_BASE


def has_media(tokens: Sequence[int]) -> bool:
    return any(t >= MEDIA_BASE for t in tokens)


def placeholder_ids(digest: str, n: int) -> list[int]:
    """The ids of an image's ``n`` positions; ``digest``: the hex SHA-256 of its pixels' source."""
    out = []
    for row in range(n):
        h = hashlib.blake2b(f"{digest}:{row}".encode(), digest_size=4).digest()
        out.append(MEDIA_BASE | (int.from_bytes(h, "little") & (MEDIA_BASE - 1)))
    return out


def text_only(tokens: Sequence[int]) -> list[int]:
    """``tokens`` without the image positions (what a text-only reader, a draft model, can take)."""
    return [t for t in tokens if t < MEDIA_BASE]
