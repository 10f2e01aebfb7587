"""A vision projector (``mmproj-*.gguf``) loaded beside its text model through libmtmd.

``tokens(picture)`` runs mtmd's own tokenizer on one media marker with the picture: the text
the projector wraps an image in (``<start_of_image>``, none for LLaVA) stays tokens, and the
image's positions become placeholder ids (engine.llama.media) whose rows ``embeddings`` gives.
The encoder runs once per picture: its output is kept by the picture's content hash (an LRU of
``KEEP_BYTES``), so the same picture in another conversation, or read again after a rewind that
cut into it, is not encoded again (``encoded`` counts the encoder's runs).

Duet gives an image's positions one after another, causally, as it does text: projectors whose
model reads images with M-RoPE (Qwen2-VL) or non-causal attention (Gemma 3) are refused at load.
Pixels come decoded (engine.vision.images): libmtmd never parses an image file here.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import DecodeError, ModelLoadError
from engine.llama import backend
from engine.llama.media import placeholder_ids
from engine.llama.model import Model
from engine.llama.native import NativeOwner

log = logging.getLogger(__name__)

KEEP_BYTES = 256 << 20  # encoder outputs kept (LLaVA-1.5 at 4,096 wide: 9 MiB a picture)


@dataclass(frozen=True)
class Picture:
    """Decoded pixels: ``rgb`` holds width × height × 3 bytes; ``digest`` the SHA-256 (hex) of
    the file they came from (what identifies the picture everywhere)."""

    digest: str
    width: int
    height: int
    rgb: bytes


@dataclass
class _Image:
    chunk: Any  # an mtmd_input_chunk copy (owned)
    ids: list[int]


class Projector(NativeOwner):
    """libmtmd over ``model``; ``model.projector`` points here until ``close()``."""

    def __init__(self, model: Model, path: Path, n_threads: int, use_gpu: bool = False) -> None:
        self.mtmd = backend.mtmd()
        self.model = model
        self.path = Path(path)
        self._ctx = None
        if not self.path.is_file():
            raise ModelLoadError(f"projector file not found: {self.path}")
        params = self.mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        backend.take_errors()
        ctx = self.mtmd.mtmd_init_from_file(os.fsencode(self.path), model.handle, params)
        if not ctx:
            reason = backend.take_errors() or "libmtmd could not load it"
            raise ModelLoadError(f"cannot load the projector {self.path.name}: {' '.join(reason.split())[:200]}")
        self._ctx = ctx
        if not self.mtmd.mtmd_support_vision(ctx):
            self.close()
            raise ModelLoadError(f"{self.path.name} is not a vision projector")
        if self.mtmd.mtmd_decode_use_mrope(ctx) or self.mtmd.mtmd_decode_use_non_causal(ctx, None):
            self.close()
            raise ModelLoadError(f"{self.path.name}: its model reads images with M-RoPE or non-causal "
                                 "attention, which Duet does not do yet (LLaVA, SmolVLM, InternVL, "
                                 "Pixtral-style projectors work)")
        self.marker: bytes = self.mtmd.mtmd_default_marker()
        self.identity = _identity(self.path)
        self.encoded = 0  # encoder runs (a counted target: a picture seen before is not encoded)
        self._images: dict[str, _Image] = {}
        self._rows: dict[int, tuple[str, int]] = {}
        self._tokens: dict[str, list[int]] = {}  # by picture: its tokens, the projector's text included
        self._embd: OrderedDict[str, np.ndarray] = OrderedDict()
        model.projector = self
        model.on_close(self.close)
        log.info("loaded the projector %s for %s", self.path.name, model.display_name)

    @property
    def name(self) -> str:
        return self.path.name

    def close(self) -> None:
        if getattr(self, "_ctx", None) is None:
            return
        for image in self._images.values():
            self.mtmd.mtmd_input_chunk_free(image.chunk)
        self._images.clear()
        self._rows.clear()
        self._tokens.clear()
        self._embd.clear()
        self.mtmd.mtmd_free(self._ctx)
        self._ctx = None
        if getattr(self.model, "projector", None) is self:
            self.model.projector = None

    # -- prompt ---------------------------------------------------------------------------
    def known(self, digest: str) -> list[int] | None:
        """The tokens of a picture seen before (None: not seen)."""
        found = self._tokens.get(digest)
        return None if found is None else list(found)

    def tokens(self, picture: Picture) -> list[int]:
        """The tokens of ``picture`` in a prompt: the projector's own text around it and one
        placeholder id per position of the image."""
        if self._ctx is None:
            raise DecodeError("the projector was closed")
        m = self.mtmd
        data = (ctypes.c_uint8 * len(picture.rgb)).from_buffer_copy(picture.rgb)
        bitmap = m.mtmd_bitmap_init(picture.width, picture.height, data)
        if not bitmap:
            raise DecodeError("libmtmd could not take the picture")
        chunks = m.mtmd_input_chunks_init()
        try:
            m.mtmd_bitmap_set_id(bitmap, picture.digest.encode())
            text = m.mtmd_input_text(self.marker, len(self.marker), False, True)
            bitmaps = (m.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = m.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), bitmaps, 1)
            if rc != 0:
                raise DecodeError(f"libmtmd could not tokenize the picture ({rc}): {backend.take_errors()}")
            out: list[int] = []
            for i in range(m.mtmd_input_chunks_size(chunks)):
                chunk = m.mtmd_input_chunks_get(chunks, i)
                if m.mtmd_input_chunk_get_type(chunk) == m.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t()
                    ptr = m.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    out += [ptr[j] for j in range(n.value)]
                else:
                    out += self._register(picture.digest, chunk)
            self._tokens[picture.digest] = out
            return list(out)
        finally:
            m.mtmd_input_chunks_free(chunks)
            m.mtmd_bitmap_free(bitmap)

    def _register(self, digest: str, chunk: Any) -> list[int]:
        known = self._images.get(digest)
        if known is not None:
            return known.ids
        n = self.mtmd.mtmd_input_chunk_get_n_tokens(chunk)
        # another projector's rows for the same picture differ: so do their ids, and no cache
        # (memory, disk, .duet) takes one's state for the other's
        ids = placeholder_ids(f"{self.identity}:{digest}", n)
        self._images[digest] = _Image(self.mtmd.mtmd_input_chunk_copy(chunk), ids)
        for row, token in enumerate(ids):
            self._rows[token] = (digest, row)
        return ids

    # -- decode ---------------------------------------------------------------------------
    def row_of(self, token: int) -> tuple[str, int]:
        """(picture digest, row) of a placeholder id; DecodeError for one of no known picture."""
        found = self._rows.get(token)
        if found is None:
            raise DecodeError("the prompt holds an image this model has not been given")
        return found

    def embeddings(self, digest: str) -> np.ndarray:
        """The encoder's output for a picture, shape (positions, n_embd), encoded once."""
        kept = self._embd.get(digest)
        if kept is not None:
            self._embd.move_to_end(digest)
            return kept
        image = self._images.get(digest)
        if image is None or self._ctx is None:
            raise DecodeError("the prompt holds an image this model has not been given")
        backend.take_errors()
        rc = self.mtmd.mtmd_encode_chunk(self._ctx, image.chunk)
        if rc != 0:
            raise DecodeError(f"the image encoder failed ({rc}): {backend.take_errors()}")
        self.encoded += 1
        n = len(image.ids)
        ptr = self.mtmd.mtmd_get_output_embd(self._ctx)
        out = np.ctypeslib.as_array(ptr, shape=(n * self.model.n_embd,)).reshape(n, -1).copy()
        self._embd[digest] = out
        while sum(e.nbytes for e in self._embd.values()) > KEEP_BYTES and len(self._embd) > 1:
            self._embd.popitem(last=False)
        return out


def _identity(path: Path) -> str:
    """A short hash that tells projector files apart: their size, head and tail (a full hash
    of a 600 MB projector would cost a second at every load)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h.update(str(size).encode())
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:16]
