"""Streaming detokenization that never emits broken UTF-8.

A character can span several tokens (emoji, CJK, byte-fallback pieces). The incremental UTF-8
decoder holds back an incomplete sequence until the token that completes it arrives.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable


class StreamingDetokenizer:
    def __init__(self, piece: Callable[[int], bytes]) -> None:
        self._piece = piece
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token: int) -> str:
        """The text that ``token`` completes (possibly empty)."""
        return self._decoder.decode(self._piece(token))

    def flush(self) -> str:
        """Whatever is held back, with U+FFFD for a sequence that never completed."""
        return self._decoder.decode(b"", final=True)
