"""The disk KV store: a prompt's KV state kept on disk once it was read, so that a later
conversation, a server request or a fresh process that starts with the same tokens restores it
instead of reading them again (an attached document, a long system prompt, an agent's tools).

It sits under the in-memory state cache (engine.cache.state_cache asks it when memory has nothing
better) and is one folder for the window, the server and the command line. An entry is one
file, named by what it holds: ``<model>-<tokens>.kv``, ``model`` a hash of the models'
fingerprints (the ones .duet files use) and KV layouts, ``tokens`` a hash of the target's token
ids, so the same prefix is written once, and another model never even lists it.

    MAGIC | u32 meta length | meta (JSON) | per context: its tokens (u32 LE), its state

The meta names, for each context (the target's, then a draft model's), its fingerprint, layout,
token count, state size and the state's BLAKE3. Nothing read is trusted: every size is checked
against the file's real size and the bounds below before anything is allocated, the tokens must
hash to the name, each state must hash to its meta, and llama.cpp must take it (the context then
holds exactly those tokens); anything else is a damaged entry: it is deleted and the prompt is
read as if there were none. Writes go to a temporary file, are flushed and renamed into place
(a reader sees a whole entry or none); they run on a writer thread (the engine thread only
copies the state out), and one that fails (a full disk) is logged and dropped. Least recently
used entries (their files' modification time, touched on each use) are deleted past the budget.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from blake3 import blake3

from engine.cache.prefix import common_prefix, dropped_span
from engine.errors import DuetError

if TYPE_CHECKING:
    from engine.llama.context import LlamaSequence

log = logging.getLogger(__name__)

MAGIC = b"DUETKV1\n"
MAX_META = 1 << 16  # the JSON meta of an entry: a few hundred bytes
MAX_TOKENS = 1 << 24  # as the largest context
# 4 GiB: about 45 documents of 3,000 tokens on the 1.5B (86 MB of f16 KV each), on a disk where
# it is a small share; a setting (CacheParams.kv_store_mb).
DEFAULT_STORE_BYTES = 4 << 30
# Prompt tokens a pass must have read (not restored) before its state is written: 512 cost the
# 1.5B about 6 s to read on the 2-core CPU, and 14 MB to write; a chat's turn (tens to a few
# hundred new tokens) is kept by its .duet file and the memory cache instead.
MIN_NEW_TOKENS = 512
FREE_MARGIN = 256 << 20  # never fill the disk: leave this much free after a write
PENDING = 2  # states copied out and waiting to be written; more are dropped (never block)


@dataclass(frozen=True)
class Entry:
    path: Path
    tokens: tuple[int, ...]  # the target's
    size: int


def model_key(ctxs: Sequence[LlamaSequence], fingerprints: Sequence[str]) -> str:
    """What an entry is for: the models' fingerprints and KV layouts (not the context size,
    which a state does not depend on: llama.cpp refuses one that does not fit)."""
    h = blake3()
    for ctx, fp in zip(ctxs, fingerprints):
        m = ctx.model
        h.update(json.dumps([fp, m.n_layer, m.n_head_kv, m.head_dim_k, m.head_dim_v,
                             ctx.params.type_k, ctx.params.type_v]).encode())
    return h.hexdigest()[:24]


def tokens_key(tokens: Sequence[int]) -> str:
    return blake3(np.asarray(tokens, dtype="<u4").tobytes()).hexdigest()[:32]


class KVStore:
    """The store's folder as seen by one runtime (one set of models): ``best`` and ``restore``
    on the thread that owns the contexts, ``save`` there too (it copies; a thread writes)."""

    def __init__(self, folder: Path, ctxs: Sequence[LlamaSequence], fingerprints: Sequence[str],
                 max_bytes: int = DEFAULT_STORE_BYTES) -> None:
        self.folder = folder
        self.fingerprints = tuple(fingerprints)
        # an entry of the target alone (a sequence without a draft model), or of both
        self.keys = [model_key(ctxs[:n], fingerprints[:n]) for n in range(1, len(ctxs) + 1)]
        self.max_bytes = max_bytes
        self._index: dict[str, Entry] = {}  # file name -> what it holds
        self._seen: set[str] = set()  # names read (or refused) already
        self._pending: queue.Queue[list[tuple[tuple[int, ...], memoryview]]] = queue.Queue(PENDING)
        self._writer: threading.Thread | None = None
        self.restores = self.saves = self.refused = 0

    # -- reading --------------------------------------------------------------------------
    def best(self, prompt: Sequence[int], n_ctxs: int = 1) -> tuple[int, Entry | None]:
        """The entry of ``n_ctxs`` contexts that keeps most of ``prompt``, and how many of its
        tokens: the head they share, or past the context's edge, the head plus the turns a cache
        shift keeps once the oldest were dropped (engine.cache.prefix.dropped_span; the shift
        is made after the restore, as on the live context)."""
        self._scan()
        best, found = 0, None
        key = self.keys[n_ctxs - 1] + "-"
        for name, e in self._index.items():
            if not name.startswith(key):
                continue
            n = common_prefix(e.tokens, prompt)
            shift = dropped_span(e.tokens, prompt) if n < len(e.tokens) else None
            if shift is not None:
                n = max(n, shift[0] + shift[2])
            if n > best:
                best, found = n, e
        return best, found

    def restore(self, ctxs: Sequence[LlamaSequence], entry: Entry) -> bool:
        """Load ``entry`` into ``ctxs`` (the target's, a draft's); False, the contexts
        cleared and the entry deleted, when it is damaged or not this runtime's."""
        try:
            states = self._read(entry, len(ctxs))
            for ctx, (tokens, data) in zip(ctxs, states):
                ctx.load_state(data, tokens)
        except (OSError, ValueError, DuetError) as e:
            self.refused += 1
            log.warning("the stored KV state %s is not used (%s); the prompt is read instead",
                        entry.path.name, _line(e))
            for ctx in ctxs:
                ctx.clear()
            self._forget(entry.path)
            return False
        self.restores += 1
        _touch(entry.path)
        return True

    def _read(self, entry: Entry, n_ctxs: int) -> list[tuple[tuple[int, ...], memoryview]]:
        with open(entry.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > self.max_bytes:
                raise ValueError("larger than the store")
            data = memoryview(f.read(size))
        meta, pos = _meta(data, self.keys[n_ctxs - 1])
        parts = meta["contexts"]
        if len(parts) != n_ctxs:
            raise ValueError(f"{len(parts)} contexts stored, {n_ctxs} here")
        out = []
        for i, part in enumerate(parts):
            n, state_size = part["n_tokens"], part["state_bytes"]
            end = pos + 4 * n + state_size
            if end > len(data):
                raise ValueError("truncated")
            tokens = tuple(np.frombuffer(data[pos:pos + 4 * n], dtype="<u4").tolist())
            state = data[pos + 4 * n:end]
            if i == 0 and tokens_key(tokens) != meta["tokens"]:
                raise ValueError("its tokens do not match its name")
            if blake3(state).hexdigest() != part["state_blake3"]:
                raise ValueError("its state fails its checksum")
            out.append((tokens, state))
            pos = end
        if pos != len(data):
            raise ValueError("trailing bytes")
        return out

    def _scan(self) -> None:
        """Index the entries of this runtime's models that appeared since the last look (other
        processes write here too); forget those that went."""
        try:
            names = {n for n in os.listdir(self.folder)
                     if n.split("-")[0] in self.keys and n.endswith(".kv")}
        except OSError:
            names = set()
        for gone in set(self._index) - names:
            del self._index[gone]
        self._seen &= names
        for name in names - self._seen:
            self._seen.add(name)
            path = self.folder / name
            try:
                entry = self._head(path)
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as e:
                log.warning("the stored KV state %s is damaged (%s); deleting it", name, _line(e))
                self._forget(path)
                continue
            self._index[name] = entry

    def _head(self, path: Path) -> Entry:
        """What an entry holds, from its head alone (the states are read when restored)."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(len(MAGIC) + 4 + MAX_META)
            key = path.name.split("-")[0]
            meta, pos = _meta(memoryview(head), key)
            n = meta["contexts"][0]["n_tokens"]
            f.seek(pos)
            raw = f.read(4 * n)
        if len(raw) != 4 * n:
            raise ValueError("truncated")
        tokens = tuple(np.frombuffer(raw, dtype="<u4").tolist())
        if tokens_key(tokens) != meta["tokens"] or path.name != f"{key}-{meta['tokens']}.kv":
            raise ValueError("its tokens do not match its name")
        return Entry(path, tokens, size)

    # -- writing --------------------------------------------------------------------------
    def save(self, ctxs: Sequence[LlamaSequence]) -> bool:
        """Copy what ``ctxs`` hold and queue it to be written (False: not queued, the writer
        is behind, or the store already holds exactly these tokens)."""
        tokens = tuple(ctxs[0].tokens)
        if not tokens or self.max_bytes <= 0 or len(ctxs) > len(self.keys):
            return False
        name = f"{self.keys[len(ctxs) - 1]}-{tokens_key(tokens)}.kv"
        if name in self._index:
            _touch(self._index[name].path)
            return False
        if not all(c.tokens for c in ctxs):
            ctxs = ctxs[:1]  # a draft context that holds nothing yet: the target's alone
            name = f"{self.keys[0]}-{tokens_key(tokens)}.kv"
            if name in self._index:
                return False
        states = [(tuple(c.tokens), c.state_bytes()) for c in ctxs]
        try:
            self._pending.put_nowait(states)
        except queue.Full:
            log.info("the KV store's writer is behind; a state of %d tokens is not kept", len(tokens))
            return False
        if self._writer is None or not self._writer.is_alive():
            self._writer = threading.Thread(target=self._write_loop, name="duet-kv-store", daemon=True)
            self._writer.start()
        return True

    def flush(self, timeout: float = 60) -> None:
        """Wait until the queued states are written (tests, and before the process ends)."""
        deadline = time.monotonic() + timeout
        while self._pending.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def _write_loop(self) -> None:
        while True:
            try:
                item = self._pending.get(timeout=5)
            except queue.Empty:
                return
            try:
                self._write(item)
            except Exception:  # a bug: the state is not kept, nothing else changes
                log.exception("writing a KV state failed")
            finally:
                self._pending.task_done()

    def _write(self, states: list[tuple[tuple[int, ...], memoryview]]) -> None:
        tkey, key = tokens_key(states[0][0]), self.keys[len(states) - 1]
        meta = json.dumps({"v": 1, "key": key, "tokens": tkey, "contexts": [
            {"fingerprint": fp, "n_tokens": len(t), "state_bytes": len(s),
             "state_blake3": blake3(s).hexdigest()}
            for fp, (t, s) in zip(self.fingerprints, states)]}).encode()
        size = len(MAGIC) + 4 + len(meta) + sum(4 * len(t) + len(s) for t, s in states)
        name = f"{key}-{tkey}.kv"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._evict(size)
            if shutil.disk_usage(self.folder).free < size + FREE_MARGIN:
                log.info("the disk is nearly full: a KV state of %d MB is not kept", size >> 20)
                return
            tmp = self.folder / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
            try:
                with open(tmp, "wb") as f:
                    f.write(MAGIC + struct.pack("<I", len(meta)) + meta)
                    for tokens, state in states:
                        f.write(np.asarray(tokens, dtype="<u4").tobytes())
                        f.write(state)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.folder / name)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as e:
            log.warning("a KV state could not be kept on disk: %s", _line(e))
            return
        self.saves += 1
        log.debug("kept a KV state of %d tokens (%d MB)", len(states[0][0]), size >> 20)

    def _evict(self, incoming: int) -> None:
        """Delete the least recently used entries (of any model) until ``incoming`` fits."""
        files = []
        for p in self.folder.glob("*.kv"):
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((st.st_mtime_ns, st.st_size, p))
        total = sum(s for _, s, _ in files) + incoming
        for _, s, p in sorted(files):
            if total <= self.max_bytes:
                break
            p.unlink(missing_ok=True)
            total -= s

    def _forget(self, path: Path) -> None:
        self._index.pop(path.name, None)
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            log.info("cannot delete %s: %s", path.name, _line(e))


def _meta(data: memoryview, key: str) -> tuple[dict, int]:
    """An entry's meta, checked, and where its first context's tokens start."""
    if bytes(data[:len(MAGIC)]) != MAGIC:
        raise ValueError("not a Duet KV entry")
    if len(data) < len(MAGIC) + 4:
        raise ValueError("truncated")
    (n,) = struct.unpack_from("<I", data, len(MAGIC))
    pos = len(MAGIC) + 4 + n
    if n > MAX_META or pos > len(data):
        raise ValueError("truncated or damaged head")
    try:
        meta = json.loads(bytes(data[len(MAGIC) + 4:pos]))
        parts = meta["contexts"]
        ok = meta["v"] == 1 and meta["key"] == key and isinstance(meta["tokens"], str) \
            and isinstance(parts, list) and 1 <= len(parts) <= 2 and all(
                isinstance(p["n_tokens"], int) and 0 < p["n_tokens"] <= MAX_TOKENS
                and isinstance(p["state_bytes"], int) and 0 < p["state_bytes"]
                and isinstance(p["state_blake3"], str) for p in parts)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"damaged head ({e})") from None
    if not ok:
        raise ValueError("written for other models, or damaged")
    return meta, pos


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__

