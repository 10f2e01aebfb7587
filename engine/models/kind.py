"""What a model file is for, read from its GGUF header (nothing is loaded): chatting (the
window's Target and Draft, the server's model names) or embeddings only.

An embedding model has an encoder architecture (BERT and its kin: all-MiniLM-L6-v2 is ``bert``),
or declares how its states are pooled into one vector (``<arch>.pooling_type``), or attends both
ways (``<arch>.attention.causal`` false); llama.cpp makes embeddings of such a model and no
text. A header that cannot be read says nothing: the file stays listed, and its load says why.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.models.hub.gguf_header import GGUFError, NeedMoreBytes, parse_header

log = logging.getLogger(__name__)

ENCODERS = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3",
                      "t5encoder", "modern-bert", "neo-bert"})
FIRST_READ = 1 << 20  # most headers' keys come before the vocabulary; all of it when needed
MAX_HEADER = 64 << 20


def embedding_only(metadata: Mapping[str, Any]) -> bool:
    """Whether a header's metadata is an embedding model's (module docstring)."""
    arch = metadata.get("general.architecture")
    return arch in ENCODERS or f"{arch}.pooling_type" in metadata or \
        metadata.get(f"{arch}.attention.causal") is False


def is_embedding_file(path: Path) -> bool:
    """Whether the GGUF file ``path`` holds an embedding model (False when its header cannot be
    read). Each file's header is read once while it stays the same (size and time)."""
    try:
        st = path.stat()
    except OSError:
        return False
    return _embedding_file(str(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=256)
def _embedding_file(path: str, _size: int, _mtime_ns: int) -> bool:
    want = FIRST_READ
    try:
        with open(path, "rb") as f:
            while True:
                f.seek(0)
                buf = f.read(want)
                try:
                    return embedding_only(parse_header(buf, with_tensors=False, kept=frozenset()).metadata)
                except NeedMoreBytes as e:
                    if len(buf) < want or want >= MAX_HEADER:
                        raise GGUFError("the header is truncated or too large") from None
                    want = min(MAX_HEADER, max(e.at_least, 2 * want))
    except (OSError, GGUFError) as e:
        log.info("cannot tell what %s is for: %s", path, e)
        return False
