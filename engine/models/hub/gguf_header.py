"""A pure GGUF header parser that works on a prefix of the file's bytes.

It reads the key/value metadata and the tensor table, never the tensor data, so a few MB read
by HTTP range requests are enough. Every length and count read from the bytes is bounded
before it is used; a prefix that ends inside the header raises :class:`NeedMoreBytes` with a
lower bound on the bytes needed, so the caller can fetch more and try again.

Format (GGUF v2/v3, little-endian): ``"GGUF"``, u32 version, u64 tensor count, u64 kv count,
then the kv pairs (string key, u32 type, value), then per tensor: name, u32 n_dims, u64 dims,
u32 ggml type, u64 offset. Strings are a u64 length and UTF-8 bytes.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any

MAGIC = b"GGUF"
MAX_STRING = 1 << 24  # 16 MiB: chat templates are a few KB; anything larger is corrupt
MAX_ARRAY = 1 << 24  # 16M items: vocabularies hold up to ~260k tokens, merges a few 100k
MAX_KV = 1 << 16
MAX_TENSORS = 1 << 20
MAX_DIMS = 8
FIRST_CHECKED_TOKEN = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID (engine/decode/speculative/compat.py)

_SCALARS = {  # gguf value type -> struct format
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}
_STRING, _ARRAY = 8, 9

# ggml tensor types: (block size in elements, bytes per block), from ggml.c's type traits.
GGML_TYPES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110),
    22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),
    29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17),
}


KEPT_ARRAYS = frozenset({"tokenizer.ggml.tokens"})  # large arrays kept whole; others are skipped
SMALL_ARRAY = 4096  # arrays up to this length are always kept (per-layer values, tags)


@dataclass(frozen=True)
class SkippedArray:
    """A large array the parser stepped over (merges, scores, token types): its type and length."""

    item_type: int
    length: int


class GGUFError(ValueError):
    """The bytes are not a GGUF header, or it is corrupt. The message is one line."""


class NeedMoreBytes(GGUFError):
    """The prefix ends inside the header; ``at_least`` bytes in total are needed to go on."""

    def __init__(self, at_least: int) -> None:
        super().__init__(f"the GGUF header goes past the bytes read (needs at least {at_least})")
        self.at_least = at_least


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def n_bytes(self) -> int:
        """Bytes of this tensor's data (0 for an unknown type: counted from offsets instead)."""
        block, size = GGML_TYPES.get(self.ggml_type, (0, 0))
        n = 1
        for d in self.shape:
            n *= d
        return n // block * size if block else 0


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, Any]  # scalars, strings; arrays as tuples (large ones as SkippedArray)
    tensors: tuple[TensorInfo, ...]
    header_size: int  # bytes up to the end of the tensor table (data starts at the next alignment)
    data_offset: int = field(default=0)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)


class _Reader:
    def __init__(self, buf: bytes | memoryview, kept: frozenset[str] = KEPT_ARRAYS) -> None:
        self.buf = memoryview(buf)
        self.pos = 0
        self.kept = kept

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.buf):
            raise NeedMoreBytes(end)
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def count(self, limit: int, what: str) -> int:
        n = self.scalar("<Q")
        if n > limit:
            raise GGUFError(f"corrupt GGUF header: {what} of {n} exceeds the limit of {limit}")
        return n

    def string(self) -> str:
        n = self.count(MAX_STRING, "a string length")
        return bytes(self.take(n)).decode("utf-8", "replace")

    def string_bytes(self) -> bytes:
        n = self.count(MAX_STRING, "a string length")
        return bytes(self.take(n))

    def string_array(self, n: int) -> tuple[bytes, ...]:
        """``n`` strings as bytes: string_bytes() inlined, as vocabularies hold 100k+ of them."""
        buf, pos, size, out = self.buf, self.pos, len(self.buf), []
        unpack_from = struct.unpack_from
        for _ in range(n):
            if pos + 8 > size:
                raise NeedMoreBytes(pos + 8)
            length = unpack_from("<Q", buf, pos)[0]
            if length > MAX_STRING:
                raise GGUFError(f"corrupt GGUF header: a string length of {length} exceeds {MAX_STRING}")
            pos += 8
            if pos + length > size:
                raise NeedMoreBytes(pos + length)
            out.append(bytes(buf[pos:pos + length]))
            pos += length
        self.pos = pos
        return tuple(out)

    def skip_array(self, itype: int, n: int, key: str) -> None:
        if itype in _SCALARS:
            self.take(n * struct.calcsize(_SCALARS[itype]))
            return
        if itype != _STRING:
            raise GGUFError(f"corrupt GGUF header: array {key[:60]} has item type {itype}")
        buf, pos, size = self.buf, self.pos, len(self.buf)
        unpack_from = struct.unpack_from
        for _ in range(n):
            if pos + 8 > size:
                raise NeedMoreBytes(pos + 8)
            length = unpack_from("<Q", buf, pos)[0]
            if length > MAX_STRING:
                raise GGUFError(f"corrupt GGUF header: a string length of {length} exceeds {MAX_STRING}")
            pos += 8 + length
        if pos > size:
            raise NeedMoreBytes(pos)
        self.pos = pos

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype = self.scalar("<I")
            n = self.count(MAX_ARRAY, f"the length of array {key[:60]}")
            if n > SMALL_ARRAY and key not in self.kept:
                self.skip_array(itype, n, key)
                return SkippedArray(itype, n)
            if itype == _STRING:
                # Token texts are kept as bytes: they are compared exactly, not displayed.
                return self.string_array(n)
            if itype in _SCALARS:
                fmt = _SCALARS[itype]
                width = struct.calcsize(fmt)
                raw = self.take(n * width)
                return tuple(v[0] for v in struct.iter_unpack(fmt, raw))
            raise GGUFError(f"corrupt GGUF header: array {key[:60]} has item type {itype}")
        raise GGUFError(f"corrupt GGUF header: key {key[:60]} has value type {vtype}")


def parse_header(buf: bytes | memoryview, *, with_tensors: bool = True,
                 kept: frozenset[str] = KEPT_ARRAYS) -> GGUFHeader:
    """Parse the header at the start of ``buf``. Raises GGUFError, or NeedMoreBytes when short.
    ``kept``: the large arrays read whole (others are stepped over: SkippedArray)."""
    r = _Reader(buf, kept)
    if len(r.buf) < 4:
        raise NeedMoreBytes(24)
    if bytes(r.take(4)) != MAGIC:
        raise GGUFError("not a GGUF file (bad magic)")
    version = r.scalar("<I")
    if version not in (2, 3):
        raise GGUFError(f"unsupported GGUF version {version}")
    n_tensors = r.count(MAX_TENSORS, "the tensor count")
    n_kv = r.count(MAX_KV, "the key count")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string()
        metadata[key] = r.value(r.scalar("<I"), key)
    tensors: list[TensorInfo] = []
    if with_tensors:
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.scalar("<I")
            if n_dims > MAX_DIMS:
                raise GGUFError(f"corrupt GGUF header: tensor {name[:60]} has {n_dims} dimensions")
            shape = tuple(r.scalar("<Q") for _ in range(n_dims))
            tensors.append(TensorInfo(name, shape, r.scalar("<I"), r.scalar("<Q")))
    align = metadata.get("general.alignment", 32)
    align = align if isinstance(align, int) and 0 < align <= 1 << 16 else 32
    data_offset = (r.pos + align - 1) // align * align
    return GGUFHeader(version, metadata, tuple(tensors), r.pos, data_offset)


# -- facts a caller wants from a header -------------------------------------------------------

VOCAB_TYPES = {"llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5, "plamo2": 6}  # llama_vocab_type


@dataclass(frozen=True)
class ModelFacts:
    """What a header says about a model, enough to estimate memory and judge a draft pairing."""

    architecture: str
    name: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_embd: int
    head_dim_k: int
    head_dim_v: int
    n_ctx_train: int
    n_vocab: int
    vocab_model: str  # tokenizer.ggml.model: "gpt2", "llama", ...
    bos: int | None
    eos: int | None
    eot: int | None
    add_bos: bool
    has_chat_template: bool
    sliding_window: int
    n_tensors: int
    tensor_bytes: int  # sum of the tensors' data sizes (0 if a type is unknown)
    tokens_digest: str  # sha256 over the token texts from FIRST_CHECKED_TOKEN on

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def tokens_digest(tokens: tuple[bytes, ...], upto: int | None = None) -> str:
    """SHA-256 of the token texts ``tokens[FIRST_CHECKED_TOKEN:upto]``, each length-prefixed."""
    h = hashlib.sha256()
    for t in tokens[FIRST_CHECKED_TOKEN:upto]:
        h.update(struct.pack("<I", len(t)))
        h.update(t)
    return h.hexdigest()


def _int(meta: dict[str, Any], key: str, default: int = 0) -> int:
    v = meta.get(key, default)
    if isinstance(v, tuple):  # per-layer arrays (some architectures): take the largest
        v = max((x for x in v if isinstance(x, int)), default=default)
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 40 else default


def model_facts(h: GGUFHeader) -> ModelFacts:
    m = h.metadata
    arch = m.get("general.architecture")
    arch = arch if isinstance(arch, str) else "unknown"
    n_embd = _int(m, f"{arch}.embedding_length")
    n_head = _int(m, f"{arch}.attention.head_count")
    n_head_kv = _int(m, f"{arch}.attention.head_count_kv", n_head)
    head_dim = n_embd // n_head if n_head else 0
    tokens = m.get("tokenizer.ggml.tokens", ())
    tokens = tokens if isinstance(tokens, tuple) else ()
    bos, eos, eot = (m.get(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "eot"))
    add_bos = m.get("tokenizer.ggml.add_bos_token")
    vocab_model = m.get("tokenizer.ggml.model")
    vocab_model = vocab_model if isinstance(vocab_model, str) else "none"
    if add_bos is None:  # llama.cpp's default: SPM (llama) vocabularies add BOS
        add_bos = vocab_model == "llama"
    name = m.get("general.name")
    return ModelFacts(
        architecture=arch, name=name if isinstance(name, str) else "",
        n_layer=_int(m, f"{arch}.block_count"), n_head=n_head, n_head_kv=n_head_kv, n_embd=n_embd,
        head_dim_k=_int(m, f"{arch}.attention.key_length", head_dim),
        head_dim_v=_int(m, f"{arch}.attention.value_length", head_dim),
        n_ctx_train=_int(m, f"{arch}.context_length"), n_vocab=len(tokens),
        vocab_model=vocab_model,
        bos=bos if isinstance(bos, int) else None, eos=eos if isinstance(eos, int) else None,
        eot=eot if isinstance(eot, int) else None, add_bos=bool(add_bos),
        has_chat_template=isinstance(m.get("tokenizer.chat_template"), str),
        sliding_window=_int(m, f"{arch}.attention.sliding_window"),
        n_tensors=len(h.tensors),
        tensor_bytes=sum(t.n_bytes for t in h.tensors) if all(t.n_bytes for t in h.tensors) else 0,
        tokens_digest=tokens_digest(tokens),
    )
