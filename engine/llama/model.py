"""A loaded GGUF model: weights (memory-mapped), vocabulary facts, metadata, tokenizer."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import LoadCancelled, ModelLoadError
from engine.llama import backend, exactness, rpc
from engine.llama.backend import lib
from engine.llama.native import NativeOwner
from engine.models import catalog

if TYPE_CHECKING:
    from engine.llama.projector import Projector

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
REPACK = ("none", "exact", "all")  # ModelSpec.repack


@dataclass(frozen=True)
class ModelSpec:
    """What to load and how. ``n_gpu_layers``: -1 offloads every layer (CUDA/Metal builds), 0 none.

    ``rpc``: ``HOST:PORT`` endpoints of ``duet-cli worker`` processes that hold the offloaded
    layers instead of a local GPU (with ``rpc``, ``n_gpu_layers`` 0 means all of them; a count
    below the number of layers keeps the first ones in this process). ``tensor_split``: the
    share of each remote device (default: in proportion to the memory each one reports).

    ``repack``: which weights llama.cpp's CPU backend copies into its repacked layouts, where a
    GEMM takes groups of 4 rows and a GEMV the rest: ``none``; ``exact``, only the layouts whose
    GEMM and GEMV sum a row alike (a build with patches/ggml-exact.patch's switch: Q4_K on x86),
    so that a token's logits do not depend on its batch; ``all``, as llama.cpp does, for decoding
    that need not be exact. ``for_decoding`` picks one.

    ``mmproj``: the vision projector loaded beside the model (engine.llama.projector): the
    model then reads images."""

    path: Path
    n_gpu_layers: int = 0
    use_mmap: bool = True
    repack: str = "none"  # "none", "exact" or "all"
    vocab_only: bool = False
    rpc: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()
    mmproj: Path | None = None


def for_decoding(spec: ModelSpec, exact: bool) -> ModelSpec:
    """``spec`` with the repacked layouts decoding can take (unless it names some): every one
    when it need not be ``exact``, those that keep it exact when it must (none in a build
    without the switch)."""
    if spec.repack != "none":
        return spec
    if not exact:
        return replace(spec, repack="all")
    return replace(spec, repack="exact") if exactness.repacks_exactly() else spec


_REPACK_LOCK = threading.Lock()


@contextmanager
def _repacking(mode: str) -> Iterator[None]:
    """llama.cpp reads which layouts to repack from a process-wide switch as a model loads: a
    load that repacks sets it and holds it until it returns."""
    if mode == "none" or not exactness.repacks_exactly():
        yield
        return
    with _REPACK_LOCK:
        exactness.set_repack_exact(mode == "exact")
        yield


def check_gguf_file(path: Path) -> None:
    """Fail with a one-line ModelLoadError unless ``path`` is a readable GGUF file."""
    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelLoadError(f"not a file: {path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelLoadError(f"cannot read {path}: {e.strerror}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF model file: {path.name}")


class Model(NativeOwner):
    """A llama.cpp model. Owns the native handle; call ``close()`` (or use as a context manager).

    ``cancel``: once set, the load stops (llama.cpp asks between tensors) with LoadCancelled."""

    def __init__(self, spec: ModelSpec | str | os.PathLike[str],
                 cancel: threading.Event | None = None) -> None:
        if not isinstance(spec, ModelSpec):
            spec = ModelSpec(Path(spec))
        self.spec = spec
        self.path = Path(spec.path)
        check_gguf_file(self.path)
        backend.init()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = spec.n_gpu_layers
        params.load_mode = lib.LLAMA_LOAD_MODE_MMAP if spec.use_mmap else lib.LLAMA_LOAD_MODE_NONE
        params.vocab_only = spec.vocab_only
        if spec.repack not in REPACK:
            raise ModelLoadError(f"repack must be one of {', '.join(REPACK)}, not {spec.repack!r}")
        # "exact" without the switch would repack every layout: none then
        repack = "none" if spec.repack == "exact" and not exactness.repacks_exactly() else spec.repack
        params.use_extra_bufts = repack != "none"
        self._watch = None
        remote = None
        if spec.rpc and not spec.vocab_only:
            remote = rpc.RemoteDevices(spec.rpc, spec.tensor_split)  # probes each worker first
            remote.apply(params)
            params.n_gpu_layers = spec.n_gpu_layers or -1
            rpc.install_abort_handler()
        self.workers = tuple(remote.workers) if remote is not None else ()
        if cancel is not None:
            if cancel.is_set():
                raise LoadCancelled("loading was cancelled")

            @lib.llama_progress_callback
            def keep_going(_progress: float, _user: ctypes.c_void_p) -> bool:
                return not cancel.is_set()

            params.progress_callback = keep_going  # referenced here until the load returns
        backend.take_errors()
        with _repacking(repack):
            handle = lib.llama_model_load_from_file(os.fsencode(self.path), params)
        if not handle and cancel is not None and cancel.is_set():
            backend.take_errors()
            raise LoadCancelled("loading was cancelled")
        if not handle:
            reason = backend.take_errors() or "llama.cpp could not load it"
            raise ModelLoadError(f"cannot load {self.path.name}: {_short(reason)}")
        self._handle = handle
        if remote is not None:
            self._watch = rpc.ConnectionWatch(spec.rpc)
        self._vocab = lib.llama_model_get_vocab(handle)
        self.n_vocab: int = lib.llama_vocab_n_tokens(self._vocab)
        self.bos: int = lib.llama_vocab_bos(self._vocab)
        self.eos: int = lib.llama_vocab_eos(self._vocab)
        self.add_bos: bool = bool(lib.llama_vocab_get_add_bos(self._vocab))
        self.vocab_type: int = lib.llama_vocab_type(self._vocab)
        # Without weights (vocab_only) llama.cpp aborts on layer queries: leave them at 0.
        has_weights = not spec.vocab_only
        self.n_ctx_train: int = lib.llama_model_n_ctx_train(handle) if has_weights else 0
        self.n_layer: int = lib.llama_model_n_layer(handle) if has_weights else 0
        self.n_embd: int = lib.llama_model_n_embd(handle) if has_weights else 0
        self.n_head: int = lib.llama_model_n_head(handle) if has_weights else 0
        self.n_head_kv: int = lib.llama_model_n_head_kv(handle) if has_weights else 0
        self.size_bytes: int = self.path.stat().st_size
        self.metadata: dict[str, str] = self._read_metadata()
        self.architecture: str = self.metadata.get("general.architecture", "unknown")
        self.can_rewind: bool = has_weights and not (
            lib.llama_model_is_recurrent(handle) or lib.llama_model_is_hybrid(handle))
        self._piece_cache: dict[int, bytes] = {}
        self._closing: list[Callable[[], object]] = []
        self.projector: Projector | None = None  # images: set by engine.llama.projector
        log.info("loaded %s (%s, %d layers, vocab %d)", self.path.name, self.architecture,
                 self.n_layer, self.n_vocab)

    # -- lifetime -------------------------------------------------------------------------
    @property
    def handle(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise ModelLoadError("the model was closed")
        return self._handle

    def on_close(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` when the model is closed, before its memory is freed (for objects
        that keep pointers into it)."""
        self._closing.append(callback)

    @property
    def vocab(self) -> ctypes.c_void_p:  # llama_vocab_p
        return self._vocab

    def close(self) -> None:
        if getattr(self, "_handle", None) is not None:
            for callback in self._closing:
                callback()
            self._closing.clear()
            if self.worker_lost() is None:
                lib.llama_model_free(self._handle)
            else:  # freeing would talk to the dead worker, which aborts: leak it instead
                log.info("not freeing %s: an RPC worker holding part of it is gone",
                         self.path.name)  # (info: the loss itself was reported in one line)
            self._handle = None
            if self._watch is not None:
                self._watch.forget()

    # -- RPC workers ----------------------------------------------------------------------
    def worker_lost(self) -> str | None:
        """The endpoint of an RPC worker that went away, or None (also for a local model)."""
        watch = getattr(self, "_watch", None)
        return watch.dead() if watch is not None else None

    @property
    def connected_workers(self) -> tuple[str, ...]:
        """RPC endpoints with a live connection (the workers that hold part of this model)."""
        watch = getattr(self, "_watch", None)
        return watch.connected if watch is not None else ()

    def check_workers(self) -> None:
        """Raise WorkerLostError when an RPC worker went away (costs microseconds, no traffic)."""
        if self._watch is not None:
            self._watch.check()


    # -- facts ----------------------------------------------------------------------------
    @property
    def display_name(self) -> str:
        """A starter model's catalog name (its file's own may say another quantization), else
        the name the file gives itself, else the file's stem."""
        return catalog.name_of(self.path.name) or self.metadata.get("general.name") or \
            self.path.stem

    @property
    def chat_template(self) -> str | None:
        raw = lib.llama_model_chat_template(self.handle, None)
        return raw.decode("utf-8", "replace") if raw else None

    @property
    def head_dim_k(self) -> int:
        key = f"{self.architecture}.attention.key_length"
        return int(self.metadata.get(key, self.n_embd // max(self.n_head, 1)))

    @property
    def head_dim_v(self) -> int:
        key = f"{self.architecture}.attention.value_length"
        return int(self.metadata.get(key, self.n_embd // max(self.n_head, 1)))

    def kv_bytes_per_token(self, bytes_per_element: float = 2.0) -> int:
        """Approximate KV-cache bytes per token (K and V, every layer) at the given element size."""
        width = self.n_head_kv * (self.head_dim_k + self.head_dim_v)
        return int(self.n_layer * width * bytes_per_element)

    @functools.cached_property
    def eog_ids(self) -> frozenset[int]:
        return frozenset(t for t in range(self.n_vocab) if lib.llama_vocab_is_eog(self._vocab, t))

    def is_eog(self, token: int) -> bool:
        return 0 <= token < self.n_vocab and bool(lib.llama_vocab_is_eog(self._vocab, token))

    def is_control(self, token: int) -> bool:
        """Whether ``token`` is a control token (a chat template's ``<|im_start|>``)."""
        return 0 <= token < self.n_vocab and bool(lib.llama_vocab_is_control(self._vocab, token))

    def token_text(self, token: int) -> bytes:
        """The vocabulary's raw text for ``token`` (as stored in the GGUF)."""
        if not 0 <= token < self.n_vocab:
            return b""
        return lib.llama_vocab_get_text(self._vocab, token) or b""

    # -- tokenizer ------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        buf = (lib.llama_token * capacity)()
        n = lib.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (lib.llama_token * capacity)()
            n = lib.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, parse_special)
        return list(buf[:n])

    @functools.cached_property
    def markup_tokens(self) -> re.Pattern[str] | None:
        """The texts of the vocabulary's control and user-defined tokens (``<|im_start|>``,
        ``<tool_call>``), as one pattern; None when there are none."""
        kinds = lib.LLAMA_TOKEN_ATTR_CONTROL | lib.LLAMA_TOKEN_ATTR_USER_DEFINED
        texts = {self.special_piece(t).decode("utf-8", "replace") for t in range(self.n_vocab)
                 if lib.llama_vocab_get_attr(self._vocab, t) & kinds}
        texts.discard("")
        if not texts:
            return None
        return re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True)))

    def inert(self, text: str) -> bool:
        """Whether ``text`` spells no control or user-defined token."""
        pattern = self.markup_tokens
        return pattern is None or pattern.search(text) is None

    def tokenize_text(self, text: str) -> list[int]:
        """Tokens of text someone wrote (a message, a tool's result): never a control token,
        and never a user-defined one either (llama.cpp matches those, ``<tool_call>`` say, even
        without parse_special): where the text spells one, it is tokenized in two pieces, split
        after its first character."""
        pattern = self.markup_tokens
        if pattern is None or pattern.search(text) is None:
            return self.tokenize(text, add_special=False, parse_special=False)
        out: list[int] = []
        pos = 0
        for m in pattern.finditer(text):
            out += self.tokenize(text[pos:m.start() + 1], add_special=False, parse_special=False)
            pos = m.start() + 1
        return out + self.tokenize(text[pos:], add_special=False, parse_special=False)

    def piece(self, token: int) -> bytes:
        """The bytes ``token`` renders as in generated text (special tokens render empty)."""
        cached = self._piece_cache.get(token)
        if cached is None and not 0 <= token < self.n_vocab:
            return b""  # an image's position (engine.llama.media): no text
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = lib.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lib.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
            cached = buf.raw[:n]
            self._piece_cache[token] = cached
        return cached

    def special_piece(self, token: int) -> bytes:
        """The bytes of ``token`` with special tokens spelled out (``<|im_end|>``)."""
        if not 0 <= token < self.n_vocab:
            return b""
        buf = ctypes.create_string_buffer(256)
        n = lib.llama_token_to_piece(self._vocab, token, buf, 256, 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lib.llama_token_to_piece(self._vocab, token, buf, -n, 0, True)
        return buf.raw[:max(n, 0)]

    def detokenize(self, tokens: list[int] | tuple[int, ...]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    # -- internals ------------------------------------------------------------------------
    def _read_metadata(self) -> dict[str, str]:
        out: dict[str, str] = {}
        buf = ctypes.create_string_buffer(256)
        for i in range(lib.llama_model_meta_count(self._handle)):
            if lib.llama_model_meta_key_by_index(self._handle, i, buf, 256) < 0:
                continue
            key = buf.value.decode("utf-8", "replace")
            n = lib.llama_model_meta_val_str_by_index(self._handle, i, None, 0)
            if n < 0 or n > 1 << 22:
                continue
            val = ctypes.create_string_buffer(n + 1)
            lib.llama_model_meta_val_str_by_index(self._handle, i, val, n + 1)
            out[key] = val.value.decode("utf-8", "replace")
        return out


def _short(reason: str) -> str:
    reason = " ".join(reason.split())
    return reason if len(reason) <= 200 else reason[:197] + "..."
