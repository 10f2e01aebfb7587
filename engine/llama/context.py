"""One llama.cpp context (sequence 0) with a reusable batch and a Python mirror of its tokens.

The mirror ``tokens`` is exactly the list of tokens whose keys/values are in the KV cache, in
order; ``decode`` appends to it and ``rewind`` truncates it in the same place that llama.cpp's
memory is changed, so the two never drift apart.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from engine.errors import CellsFullError, ContextFullError, DecodeError, ModelLoadError, RewindError
from engine.llama import abort, backend, exactness
from engine.llama.backend import lib
from engine.llama.context_params import KV_TYPES, ContextParams, check_memory, flash_attn_type
from engine.llama.media import has_media, is_media
from engine.llama.model import Model
from engine.llama.native import NativeOwner

log = logging.getLogger(__name__)

Logits = Literal["last", "all", "none"] | int  # which tokens' logits a decode returns


@dataclass(frozen=True)
class Part:
    """One sequence's share of a batch: ``tokens`` appended to ``ctx``, with logits for the
    last token, all of them, none, or the last ``n`` (an int: a draft behind forced tokens)."""

    ctx: LlamaSequence
    tokens: Sequence[int]
    logits: Logits = "last"


class _Llama:
    """The llama.cpp context that the sequences share: handle, memory, batch, abort hook."""

    def __init__(self, model: Model, params: ContextParams) -> None:
        cp = lib.llama_context_default_params()
        n_seq = params.n_parallel
        # one pool of n_ctx cells for all sequences, as llama-server's unified KV: each may fill
        # the whole context, and memory does not grow with the sequences (when the pool runs
        # out, the scheduler frees the cells of sequences that no reply runs on)
        cp.n_ctx = params.n_ctx
        cp.n_batch = params.n_batch
        cp.n_ubatch = min(params.n_batch, 512)
        cp.n_seq_max = n_seq
        # one buffer for all sequences: a batch that mixes them (decodes, drafts, a prefill)
        # is one pass (split per sequence, each would be its own pass)
        cp.kv_unified = True
        cp.n_threads = cp.n_threads_batch = params.threads()
        cp.type_k = KV_TYPES[params.type_k]
        cp.type_v = KV_TYPES[params.type_v]
        cp.flash_attn_type = flash_attn_type(params, model.spec.n_gpu_layers)
        if params.exact and params.exact_gpu and model.spec.n_gpu_layers != 0:
            exactness.hold_on_gpu()  # Vulkan's batch-invariant mode
            # (else a big batch of a CPU layer would run on the GPU, a small one on the CPU)
            cp.op_offload = False
        # flash attention reads a sequence's cells one by one in cell order, skipping empty and
        # other sequences' cells; plain attention sums over every cell. Either way the sums
        # follow the cells' layout, which a saved state's restore compacts (see session.store)
        self.flash_attn = cp.flash_attn_type == lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
        backend.take_errors()
        handle = lib.llama_init_from_model(model.handle, cp)
        if not handle:
            reason = backend.take_errors() or "out of memory?"
            raise ModelLoadError(f"cannot create a context of {params.n_ctx} tokens: {reason}")
        self.handle = handle
        self.mem = lib.llama_get_memory(handle)
        self.model = model
        self.n_batch: int = lib.llama_n_batch(handle)
        self.batch = lib.llama_batch_init(max(self.n_batch, params.n_batch), 0, 1)
        self.n_outputs = 0
        self._embd_batch: Any = None  # a batch of embeddings (image positions), made when needed
        self.cancel: threading.Event | None = None  # the stop of the decode under way
        self.abort_cb = lib.ggml_abort_callback(self._should_abort)  # (a plain Event's)

    def embd_batch(self) -> Any:
        if self._embd_batch is None:
            self._embd_batch = lib.llama_batch_init(self.n_batch, self.model.n_embd, 1)
        return self._embd_batch

    def close(self) -> None:
        if self.handle is not None:
            lib.llama_batch_free(self.batch)
            if self._embd_batch is not None:
                lib.llama_batch_free(self._embd_batch)
                self._embd_batch = None
            if self.model.worker_lost() is None:
                lib.llama_free(self.handle)  # (with a lost RPC worker this would abort: leaked)
            self.handle = None

    def _should_abort(self, _data: ctypes.c_void_p) -> bool:
        cancel = self.cancel
        return bool(cancel is not None and cancel.is_set())

    @contextlib.contextmanager
    def stoppable(self, cancel: threading.Event | None) -> Iterator[None]:
        """The passes run inside stop at their next node once ``cancel`` is set (engine.llama.abort)."""
        if cancel is None:
            yield
            return
        self.cancel = cancel
        abort.hook(self.handle, cancel, self.abort_cb)
        backend.watch_stop(id(self), cancel)
        try:
            yield
        finally:
            abort.unhook(self.handle)
            self.cancel = None
            backend.watch_stop(id(self), None)


class LlamaSequence(NativeOwner):
    """One sequence of a llama context over ``model`` (``n_parallel`` sequences share it; each
    has ``n_ctx`` tokens of room). ``LlamaSequence(model, params)`` makes the llama context and is
    its sequence 0; ``sequences`` are all of them, this one first. Logits returned by
    ``logits``/``logits_rows``/``decode_batch`` are views into llama.cpp's buffer, valid until
    the next decode of any sequence."""

    def __init__(self, model: Model, params: ContextParams = ContextParams()) -> None:
        backend.init()
        self.model = model
        self.params = params
        check_memory(model, params)
        self._llama: _Llama | None = _Llama(model, params)
        self._owner = True
        self._setup(0)
        self.sequences: tuple[LlamaSequence, ...] = (self, *(self._view(i)
                                                      for i in range(1, params.n_parallel)))

    def _setup(self, seq: int) -> None:
        self.seq = seq
        self.n_ctx: int = self.params.n_ctx
        self.n_batch: int = self._shared.n_batch
        self.n_vocab: int = self.model.n_vocab
        self.tokens: list[int] = []
        # a cache shift moved this sequence's cells since it was last empty or restored: they
        # may no longer sit in the order a restore lays them out (engine.conversation.session)
        self.shifted = False

    def _view(self, seq: int) -> LlamaSequence:
        view = LlamaSequence.__new__(LlamaSequence)
        view.model, view.params, view._llama, view._owner = self.model, self.params, self._llama, False
        view._setup(seq)
        view.sequences = ()
        return view

    @property
    def flash_attn(self) -> bool:
        """Flash attention is on: a sequence's sums do not depend on where its cells lie."""
        return self._shared.flash_attn

    @property
    def _shared(self) -> _Llama:
        if self._llama is None or self._llama.handle is None:
            raise DecodeError("the context was closed")
        return self._llama

    @property
    def _handle(self) -> Any:
        return self._shared.handle

    @property
    def _mem(self) -> Any:
        return self._shared.mem

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_owner", False) and self._llama is not None:
            self._llama.close()
        self._llama = None

    # -- state ----------------------------------------------------------------------------
    @property
    def n_past(self) -> int:
        return len(self.tokens)

    @property
    def n_free(self) -> int:
        return self.n_ctx - len(self.tokens)

    def kv_pos_max(self) -> int:
        """llama.cpp's own highest position in this sequence (-1 when empty): the mirror's check."""
        return lib.llama_memory_seq_pos_max(self._mem, self.seq)

    # -- decoding -------------------------------------------------------------------------
    def decode(self, tokens: Sequence[int], *, logits: Logits = "last",
               cancel: threading.Event | None = None) -> int:
        """Append ``tokens`` to the sequence. Returns how many logits rows the call produced.

        ``logits``: for the last token, all, none, or the last ``n`` (int). More than one row
        needs the tokens to fit one batch (verification of a draft). A long
        prompt is split into batches; ``cancel`` aborts between (and inside) them, leaving the
        context as it was before the call.
        """
        n = len(tokens)
        if n == 0:
            raise ValueError("decode needs at least one token")
        if has_media(tokens):
            return self._decode_runs(tokens, _rows(logits, n), cancel)
        if n > self.n_free:
            raise ContextFullError(
                f"the context is full: {self.n_past} + {n} tokens exceed its {self.n_ctx}")
        rows = _rows(logits, n)
        if rows > 1 and n > self.n_batch:
            raise ValueError(f"cannot return logits for {rows} tokens in one batch of {self.n_batch}")
        shared = self._shared
        self.model.check_workers()
        start = self.n_past
        with shared.stoppable(cancel):
            for lo in range(0, n, self.n_batch):
                chunk = tokens[lo:lo + self.n_batch]
                last_chunk = lo + self.n_batch >= n
                _fill(shared.batch, [(self, chunk, rows if last_chunk else 0)])
                rc = lib.llama_decode(shared.handle, shared.batch)
                if rc != 0:
                    self._restore(start)
                    raise _decode_error(rc)
                self.tokens.extend(chunk)
                shared.n_outputs = rows if last_chunk else 0
        return shared.n_outputs

    def _decode_runs(self, tokens: Sequence[int], rows: int, cancel: threading.Event | None) -> int:
        """``decode`` of tokens with images in them: each run of text or of one kind (image
        positions) in order, the logits rows from the last run; all or nothing."""
        if len(tokens) > self.n_free:
            raise ContextFullError(
                f"the context is full: {self.n_past} + {len(tokens)} tokens exceed its {self.n_ctx}")
        runs: list[list[int]] = []
        for t in tokens:
            if runs and is_media(runs[-1][-1]) == is_media(t):
                runs[-1].append(t)
            else:
                runs.append([t])
        if rows > len(runs[-1]):
            raise ValueError("logits are returned for the last run of text or image positions only")
        start = self.n_past
        try:
            for i, run in enumerate(runs):
                want = rows if i == len(runs) - 1 else 0
                if is_media(run[0]):
                    self._decode_embeddings(run, want, cancel)
                else:
                    self.decode(run, logits=want, cancel=cancel)
        except BaseException:
            self._restore(start)
            raise
        return self._shared.n_outputs

    def _decode_embeddings(self, ids: Sequence[int], rows: int, cancel: threading.Event | None) -> None:
        """Append image positions: the projector's embedding row behind each placeholder id."""
        projector = self.model.projector
        if projector is None:
            raise DecodeError("the prompt holds an image, and no projector is loaded for this model")
        shared = self._shared
        batch = shared.embd_batch()
        n_embd = self.model.n_embd
        start = self.n_past
        with shared.stoppable(cancel):
            for lo in range(0, len(ids), self.n_batch):
                chunk = ids[lo:lo + self.n_batch]
                found = [projector.row_of(t) for t in chunk]
                rows_ = np.ascontiguousarray(np.stack([projector.embeddings(d)[r] for d, r in found]),
                                             dtype=np.float32)
                if rows_.shape[1] != n_embd:  # (libmtmd checks this at load: never past the batch)
                    raise DecodeError(f"the projector gives rows of {rows_.shape[1]}, not {n_embd}")
                ctypes.memmove(batch.embd, rows_.ctypes.data, rows_.nbytes)
                last_chunk = lo + self.n_batch >= len(ids)
                pos0 = self.n_past
                for i in range(len(chunk)):
                    batch.pos[i] = pos0 + i
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = self.seq
                    batch.logits[i] = last_chunk and i >= len(chunk) - rows
                batch.n_tokens = len(chunk)
                rc = lib.llama_decode(shared.handle, batch)
                if rc != 0:
                    self._restore(start)
                    raise _decode_error(rc)
                self.tokens.extend(chunk)
                shared.n_outputs = rows if last_chunk else 0

    def logits(self, row: int = -1) -> np.ndarray:
        """Logits of output ``row`` of the last decode (shape (n_vocab,), a zero-copy view)."""
        ptr = lib.llama_get_logits_ith(self._handle, row)
        if not ptr:
            raise DecodeError(f"no logits for row {row}")
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def logits_rows(self) -> np.ndarray:
        """All output rows of the last decode, shape (n_outputs, n_vocab), a zero-copy view."""
        ptr = lib.llama_get_logits(self._handle)
        return np.ctypeslib.as_array(ptr, shape=(self._shared.n_outputs, self.n_vocab))

    def rewind(self, n_keep: int) -> None:
        """Drop every token from position ``n_keep`` on (llama_memory_seq_rm), mirror included."""
        if n_keep < 0:
            raise ValueError("n_keep must be >= 0")
        if n_keep >= self.n_past:
            return
        if not lib.llama_memory_seq_rm(self._mem, self.seq, n_keep, -1):
            raise RewindError(
                f"{self.model.display_name} cannot rewind its cache to a position (recurrent model)")
        del self.tokens[n_keep:]

    def drop(self, p0: int, p1: int) -> bool:
        """Remove the tokens at positions [p0, p1) and shift the later ones down by ``p1 - p0``
        (llama_memory_seq_rm + llama_memory_seq_add; the keys are re-rotated at the next
        decode), mirror included. False, and nothing changed, when the memory cannot shift
        (e.g. a recurrent model or M-RoPE): the caller rewinds and recomputes instead."""
        if not 0 <= p0 <= p1 <= self.n_past:
            raise ValueError(f"cannot drop [{p0}, {p1}) of {self.n_past} tokens")
        if p0 == p1:
            return True
        if not lib.llama_memory_can_shift(self._mem):
            return False
        if not lib.llama_memory_seq_rm(self._mem, self.seq, p0, p1):
            return False
        if p1 < self.n_past:
            lib.llama_memory_seq_add(self._mem, self.seq, p1, -1, p0 - p1)
        del self.tokens[p0:p1]
        self.shifted = True
        if self.kv_pos_max() != self.n_past - 1:  # never leave the cache and mirror apart
            log.warning("the cache shift left positions up to %d for %d tokens; clearing it",
                        self.kv_pos_max(), self.n_past)
            self.clear()
        return True

    def copy_from(self, other: LlamaSequence, n: int) -> bool:
        """Hold the first ``n`` tokens of ``other``, a sequence of the same llama context, in
        place of what this one held (llama_memory_seq_cp: in the one cache the sequences share,
        the cells are shared, nothing is computed). False, and this sequence cleared, when the
        memory cannot copy a part (e.g. a recurrent model)."""
        if other._llama is not self._llama or other is self or not 0 < n <= other.n_past:
            raise ValueError("copy_from needs another sequence of the same context")
        self.clear()
        lib.llama_memory_seq_cp(self._mem, other.seq, self.seq, 0, n)
        if self.kv_pos_max() != n - 1:
            self.clear()
            return False
        self.tokens = list(other.tokens[:n])
        return True

    def clear(self) -> None:
        self.model.check_workers()
        lib.llama_memory_seq_rm(self._mem, self.seq, -1, -1)
        self.tokens.clear()
        self.shifted = False

    # -- saved state ----------------------------------------------------------------------
    def state_bytes(self) -> memoryview:
        """The KV state of this sequence (llama_state_seq_get_data), covering ``self.tokens``."""
        self.model.check_workers()
        size = lib.llama_state_seq_get_size(self._handle, self.seq)
        buf = (ctypes.c_uint8 * size)()
        written = lib.llama_state_seq_get_data(self._handle, buf, size, self.seq)
        return memoryview(buf).cast("B")[:written]

    def load_state(self, data: bytes | bytearray | memoryview, tokens: Sequence[int]) -> None:
        """Restore a state saved by ``state_bytes`` that covers ``tokens``; checked, or cleared."""
        self.clear()
        view = memoryview(data).cast("B")
        buf = (ctypes.c_uint8 * len(view)).from_buffer_copy(view) if view.readonly else \
            (ctypes.c_uint8 * len(view)).from_buffer(view)
        read = lib.llama_state_seq_set_data(self._handle, buf, len(view), self.seq)
        if read == 0 or self.kv_pos_max() != len(tokens) - 1:
            self.clear()
            raise DecodeError("the saved KV state does not fit this context")
        self.tokens = list(tokens)

    # -- internals ------------------------------------------------------------------------
    def _restore(self, n_keep: int) -> None:
        """After a failed or aborted decode, drop whatever llama.cpp kept past ``n_keep``."""
        lib.llama_memory_seq_rm(self._mem, self.seq, n_keep, -1)
        del self.tokens[n_keep:]


def decode_batch(parts: Sequence[Part], cancel: threading.Event | None = None) -> list[np.ndarray]:
    """Decode several sequences' tokens in one llama_decode (they share a llama context); the
    logits rows of each part, in order (zero-copy views, valid until the next decode). On a
    failure every sequence is left as it was and the error is raised; ``cancel`` set during
    the pass aborts it that way (DecodeError "cancelled")."""
    if not parts:
        return []
    if any(has_media(p.tokens) for p in parts):
        return _decode_in_turn(parts, cancel)
    shared = parts[0].ctx._shared
    total = sum(len(p.tokens) for p in parts)
    if total > shared.n_batch:
        raise ValueError(f"a batch of {total} tokens exceeds {shared.n_batch}")
    for p in parts:
        if p.ctx._llama is not shared or not p.tokens:
            raise ValueError("every part needs tokens, and one llama context for all")
        if len(p.tokens) > p.ctx.n_free:
            raise ContextFullError(f"the context is full: {p.ctx.n_past} + {len(p.tokens)} "
                                   f"tokens exceed its {p.ctx.n_ctx}")
    parts[0].ctx.model.check_workers()
    starts = [p.ctx.n_past for p in parts]
    _fill(shared.batch, [(p.ctx, p.tokens, _rows(p.logits, len(p.tokens))) for p in parts])
    with shared.stoppable(cancel):
        rc = lib.llama_decode(shared.handle, shared.batch)
    if rc != 0:
        for p, start in zip(parts, starts):
            p.ctx._restore(start)
        raise _decode_error(rc)
    counts = [_rows(p.logits, len(p.tokens)) for p in parts]
    shared.n_outputs = sum(counts)
    n_vocab = parts[0].ctx.n_vocab
    buf = np.ctypeslib.as_array(lib.llama_get_logits(shared.handle),
                                shape=(shared.n_outputs, n_vocab))
    out, row = [], 0
    for p, n in zip(parts, counts):
        p.ctx.tokens.extend(p.tokens)
        out.append(buf[row:row + n])
        row += n
    return out


def _decode_in_turn(parts: Sequence[Part], cancel: threading.Event | None) -> list[np.ndarray]:
    """``decode_batch`` of parts with image positions (an embeddings batch takes no tokens):
    each part decoded alone, its rows copied; on a failure every part is put back."""
    starts = [p.ctx.n_past for p in parts]
    out = []
    try:
        for p in parts:
            rows = p.ctx.decode(p.tokens, logits=p.logits, cancel=cancel)
            out.append(np.array(p.ctx.logits_rows()[-rows:]) if rows else
                       np.empty((0, p.ctx.n_vocab), np.float32))
    except BaseException:
        for p, start in zip(parts, starts):
            p.ctx._restore(start)
        raise
    return out


def _rows(logits: Logits, n: int) -> int:
    """How many of ``n`` tokens' logits ``logits`` asks for (always the last ones)."""
    if isinstance(logits, int):
        return max(0, min(logits, n))
    return {"all": n, "last": 1, "none": 0}[logits]


def _fill(b: Any, parts: Sequence[tuple[LlamaSequence, Sequence[int], int]]) -> None:
    """Write ``parts`` (sequence, tokens, how many of the last tokens get logits) into ``b``."""
    n = 0
    for ctx, chunk, rows in parts:
        pos0 = ctx.n_past
        for i, tok in enumerate(chunk):
            b.token[n] = tok
            b.pos[n] = pos0 + i
            b.n_seq_id[n] = 1
            b.seq_id[n][0] = ctx.seq
            b.logits[n] = i >= len(chunk) - rows
            n += 1
    b.n_tokens = n


def _decode_error(rc: int) -> Exception:
    if rc == 2:
        return DecodeError("cancelled")
    if rc == 1:
        return CellsFullError("no room left in the KV cache for this batch")
    return DecodeError(f"llama_decode failed ({rc}): {backend.take_errors()}")


