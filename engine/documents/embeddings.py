"""Sentence embeddings through llama.cpp: one vector per input text, as llama-server gives them.

An :class:`Embedder` owns its own llama context, made with ``embeddings=True`` and a pooling
type, over a model that may also serve a chat: llama.cpp lets several contexts share one
model's weights, so embeddings cost no second copy of the model, only a small context.

Choices, and why:

* Pooling: the model's own (``<arch>.pooling_type`` in the GGUF: mean for all-MiniLM-L6-v2,
  as its sentence-transformers Pooling module says). A chat model has none; llama-server then
  keeps "none" (token vectors) and its ``/v1/embeddings`` refuses ("Pooling type 'none' is not
  OAI compatible") unless started with ``--pooling``. One vector per input is what callers
  want, so we choose for them: mean, the ``--pooling mean`` of llama-server (a causal model
  was not trained to sum a text up in its last token; the mean of its hidden states is the
  steadier sentence vector, and on SmolLM2 it ranks paraphrases above unrelated pairs).
* Normalisation: L2, llama-server's default (``embd_normalize`` 2), so a dot product is the
  cosine similarity.
* Length: an input longer than the context is refused in one line, as OpenAI's API and
  llama-server refuse it, rather than silently truncated: a truncated text's vector stands
  for a text nobody sent.
* Batching: several inputs per ``llama_decode``, each its own sequence id, read back with
  ``llama_get_embeddings_seq``; the memory (a causal model's KV cache) is cleared between
  batches, as each input starts at position 0. One physical batch (``n_ubatch``) holds the
  whole context, because llama.cpp pools a sequence within one micro-batch: a text split
  across two would be averaged over its second half only.
* Text is data: inputs are tokenized with the model's special tokens added (BOS/CLS, SEP)
  but without parsing markup, so a text that spells ``[SEP]`` or ``<|im_end|>`` stays text.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from engine.errors import ContextFullError, DecodeError, DuetError, ModelLoadError
from engine.llama import backend
from engine.llama.backend import lib
from engine.llama.context_params import ContextParams, check_memory, flash_attn_type
from engine.llama.model import Model, ModelSpec
from engine.llama.native import NativeOwner

log = logging.getLogger(__name__)

Pooling = Literal["mean", "cls", "last"]
POOLING_TYPES: dict[str, int] = {
    "mean": lib.LLAMA_POOLING_TYPE_MEAN,
    "cls": lib.LLAMA_POOLING_TYPE_CLS,
    "last": lib.LLAMA_POOLING_TYPE_LAST,
}
DEFAULT_N_CTX = 512  # tokens per input at most, unless asked (all-MiniLM-L6-v2 was trained on 512)
DEFAULT_MAX_SEQS = 16  # inputs per llama_decode at most


class InputTooLongError(ContextFullError):
    """An input has more tokens than the embedder's context holds; nothing was computed."""

    def __init__(self, index: int, n_tokens: int, limit: int) -> None:
        super().__init__(f"input {index} is too long to embed: {n_tokens} tokens, the most is {limit}")
        self.index, self.n_tokens, self.limit = index, n_tokens, limit


def model_pooling(model: Model) -> Pooling | None:
    """The pooling a GGUF asks for in its metadata (``<arch>.pooling_type``), None if it says
    none. A reranker's ("rank") makes no embeddings: refused in one line."""
    raw = model.metadata.get(f"{model.architecture}.pooling_type")
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    if value == lib.LLAMA_POOLING_TYPE_RANK:
        raise ModelLoadError(f"{model.display_name} is a reranker (pooling 'rank'), not an embedding model")
    names: tuple[Pooling, ...] = ("mean", "cls", "last")
    return next((name for name in names if POOLING_TYPES[name] == value), None)


class Embedder(NativeOwner):
    """Embeddings of texts with ``model`` (its own llama context; the model may be shared).

    ``pooling``: None takes the model's (see :func:`model_pooling`), else mean. ``n_ctx``: the
    most tokens one input may have (default: 512, or the model's training context if smaller;
    never more than that). ``max_seqs``: inputs decoded together at most. Calls are serialised
    (a llama context serves one call at a time). ``close()`` frees the context; closing the
    model closes it first."""

    def __init__(self, model: Model, *, pooling: Pooling | None = None, n_ctx: int | None = None,
                 max_seqs: int = DEFAULT_MAX_SEQS, n_threads: int = 0) -> None:
        backend.init()
        self._lock = threading.Lock()  # one call at a time; close() waits for a running one
        self._handle: Any = None
        self.model = model
        self.pooling: Pooling = pooling or model_pooling(model) or "mean"
        limit = model.n_ctx_train if model.n_ctx_train > 0 else DEFAULT_N_CTX
        wanted = n_ctx if n_ctx is not None else min(limit, DEFAULT_N_CTX)
        if wanted > limit:
            log.info("%s: an embedding context of %d tokens exceeds the model's training context; "
                     "using %d", model.display_name, wanted, limit)
        self.n_ctx: int = max(1, min(wanted, limit))
        self.max_seqs: int = max(1, min(max_seqs, 64))
        self.n_embd: int = lib.llama_model_n_embd_out(model.handle)
        self.n_tokens = 0  # tokens read by the last call (usage)
        params = ContextParams(n_ctx=max(16, self.n_ctx), n_batch=max(16, self.n_ctx),
                               n_threads=n_threads, n_parallel=self.max_seqs)
        check_memory(model, params)
        cp = lib.llama_context_default_params()
        cp.n_ctx = params.n_ctx
        cp.n_batch = cp.n_ubatch = params.n_batch  # one micro-batch per decode: see the module doc
        cp.n_seq_max = self.max_seqs
        cp.kv_unified = True  # one pool of cells: a single long input may fill the context
        cp.n_threads = cp.n_threads_batch = params.threads()
        cp.embeddings = True
        cp.pooling_type = POOLING_TYPES[self.pooling]
        # An embedding model's batch of texts: as for several sequences, flash attention skips
        # the cells of the others (all-MiniLM-L6-v2, batches of 16 texts of ~150 tokens on the
        # 2-core CPU: 17.8 texts/s with it, 6.9 without; bench documents); its tiled sums move a
        # vector by about 1e-4 between a batch and one text alone. A chat model's pooled states
        # keep the plain kernel (there they moved by 9e-3).
        several = params if model_pooling(model) is not None else ContextParams()
        cp.flash_attn_type = flash_attn_type(several, model.spec.n_gpu_layers)
        backend.take_errors()
        handle = lib.llama_init_from_model(model.handle, cp)
        if not handle:
            reason = backend.take_errors() or "out of memory?"
            raise ModelLoadError(f"cannot create an embedding context for {model.display_name}: {reason}")
        self._handle = handle
        self._mem = lib.llama_get_memory(handle)  # NULL for an encoder-only model (BERT)
        self._batch = lib.llama_batch_init(params.n_batch, 0, 1)
        model.on_close(functools.partial(_close_if_alive, weakref.ref(self)))  # before the weights go
        log.info("embedder on %s: pooling %s, %d tokens per input, up to %d inputs per batch",
                 model.display_name, self.pooling, self.n_ctx, self.max_seqs)

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        lock = getattr(self, "_lock", None)
        if lock is None:  # (__init__ failed before anything was made)
            return
        with lock:
            if self._handle is not None:
                lib.llama_batch_free(self._batch)
                if self.model.worker_lost() is None:
                    lib.llama_free(self._handle)
                self._handle = None

    # -- embedding ------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """The tokens ``text`` is embedded as: the model's special tokens added (CLS/SEP, BOS),
        markup in the text left as text."""
        return self.model.tokenize(text, add_special=True, parse_special=False)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per text, in order (shape (len(texts), n_embd)).
        ``self.n_tokens`` is then the tokens read. InputTooLongError (one line) when a text
        does not fit; DuetError for an empty text (a model that adds no BOS has nothing to
        read)."""
        vectors, _ = self.embed_counted(texts)
        return vectors

    def embed_counted(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """:meth:`embed` and the number of tokens read (what an API reports as usage), together:
        safe when several threads share the embedder."""
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        if self._handle is None:  # (the model's vocabulary may be gone too: do not tokenize)
            raise DecodeError("the embedder was closed")
        tokenized = [self.tokenize(t) for t in texts]
        for i, tokens in enumerate(tokenized):
            if not tokens:
                raise DuetError(f"input {i} is empty: there is nothing to embed")
            if len(tokens) > self.n_ctx:
                raise InputTooLongError(i, len(tokens), self.n_ctx)
        out = np.zeros((len(tokenized), self.n_embd), dtype=np.float32)
        with self._lock:
            if self._handle is None:
                raise DecodeError("the embedder was closed")
            self.model.check_workers()
            for first, group in self._batches(tokenized):
                out[first:first + len(group)] = self._decode(group)
            n_tokens = sum(len(t) for t in tokenized)
            self.n_tokens = n_tokens
        return out, n_tokens

    def _batches(self, tokenized: list[list[int]]) -> list[tuple[int, list[list[int]]]]:
        """Consecutive inputs packed into batches of at most ``n_ctx`` tokens and ``max_seqs``
        inputs: (index of the first, the inputs)."""
        batches: list[tuple[int, list[list[int]]]] = []
        group: list[list[int]] = []
        first = size = 0
        for i, tokens in enumerate(tokenized):
            if group and (size + len(tokens) > self.n_ctx or len(group) == self.max_seqs):
                batches.append((first, group))
                group, first, size = [], i, 0
            group.append(tokens)
            size += len(tokens)
        if group:
            batches.append((first, group))
        return batches

    def _decode(self, group: list[list[int]]) -> np.ndarray:
        """Embed one batch: every input a sequence from position 0, every token an output
        (pooling reads them all); the pooled vectors, L2-normalised."""
        if self._mem:
            lib.llama_memory_clear(self._mem, True)
        b, n = self._batch, 0
        for seq, tokens in enumerate(group):
            for pos, tok in enumerate(tokens):
                b.token[n] = tok
                b.pos[n] = pos
                b.n_seq_id[n] = 1
                b.seq_id[n][0] = seq
                b.logits[n] = True
                n += 1
        b.n_tokens = n
        backend.take_errors()
        rc = lib.llama_decode(self._handle, b)
        if rc != 0:
            raise DecodeError(f"llama_decode failed ({rc}) while embedding: {backend.take_errors()}")
        rows = np.empty((len(group), self.n_embd), dtype=np.float32)
        for seq in range(len(group)):
            ptr = lib.llama_get_embeddings_seq(self._handle, seq)
            if not ptr:
                raise DecodeError(f"llama.cpp returned no embedding for sequence {seq}")
            rows[seq] = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                              shape=(self.n_embd,))
        if self._mem:
            lib.llama_memory_clear(self._mem, True)
        return _l2_normalised(rows)


# Vectors the retrieval keeps, by text: a conversation about a file ranks its earlier messages'
# passages again at every turn (engine.prompts.attachments), and questions about one file share
# candidates. 4,096 vectors of all-MiniLM (384 floats) are 6 MiB.
REMEMBERED_VECTORS = 4096


class EmbeddingSource:
    """Where the vectors of a program come from (the server's ``/v1/embeddings``, the window's
    retrieval): the embedding model at ``path`` when there is one, else ``chat_model``'s hidden
    states, mean-pooled. The Embedder is made at its first use, and every use runs through
    ``run`` (on the thread that owns llama.cpp: the engine's)."""

    def __init__(self, chat_model: Model | None, path: Path | None,
                 run: Callable[[Callable[[], Any]], Any] = lambda fn: fn()) -> None:
        self.chat_model, self.path, self.run = chat_model, path, run
        self._embedder: Embedder | None = None
        self._own_model: Model | None = None
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    @property
    def model(self) -> Model:
        """The model whose tokens an input is (the embedding model is loaded if it was not)."""
        model: Model = self.run(lambda: self._made().model)
        return model

    def embed_counted(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """The vectors of ``texts`` (rows) and the tokens they took (Embedder.embed_counted)."""
        result: tuple[np.ndarray, int] = self.run(lambda: self._made().embed_counted(texts))
        return result

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts`` (rows); each text's is remembered once made (the last
        REMEMBERED_VECTORS used), so a text asked again is not read again. (The embedder works
        one batch at a time anyway: holding the lock while it runs costs nothing.)"""
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
            if missing:
                try:
                    made = self.embed_counted(missing)[0]
                except InputTooLongError as e:  # its index among ``texts``, not among the missing
                    raise InputTooLongError(texts.index(missing[e.index]), e.n_tokens, e.limit) from None
                self._vectors.update(zip(missing, made, strict=True))
            for text in texts:
                self._vectors.move_to_end(text)
            rows = [self._vectors[t] for t in texts]
            while len(self._vectors) > REMEMBERED_VECTORS:
                self._vectors.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)

    def close(self) -> None:
        """Free the embedder and an embedding model of its own (once nothing else runs)."""
        if self._embedder is not None:
            self._embedder.close()
            self._embedder = None
        if self._own_model is not None:
            self._own_model.close()
            self._own_model = None

    def _made(self) -> Embedder:
        if self._embedder is None:
            model = self.chat_model
            if self.path is not None:
                self._own_model = model = Model(ModelSpec(self.path))
            assert model is not None, "an EmbeddingSource needs a chat model or a path"
            self._embedder = Embedder(model)
        return self._embedder


def _close_if_alive(ref: weakref.ref[Embedder]) -> None:
    """The model's closing hook: free the embedder's context if it still exists (a weak
    reference, so that the model does not keep a dropped embedder alive)."""
    embedder = ref()
    if embedder is not None:
        embedder.close()


def _l2_normalised(rows: np.ndarray) -> np.ndarray:
    """Each row divided by its Euclidean norm (a zero row stays zero), as llama-server's
    ``common_embd_normalize(..., 2)``, computed in double precision."""
    norms = np.sqrt(np.sum(rows.astype(np.float64) ** 2, axis=1, keepdims=True))
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    return (rows * scale).astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors (of normalised rows, their dot product)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(np.dot(a, b) / (na * nb)) if na > 0 and nb > 0 else 0.0
