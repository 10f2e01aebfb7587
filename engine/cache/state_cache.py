"""Saved KV states of recent conversations, so that a switch does not re-prefill.

The context holds one conversation at a time; the generator reuses the longest common prefix of
what it holds. Before a prompt would throw away a long stretch of the live context (another
conversation, another version of a reply, another server client), that state is saved here;
when a prompt shares more with a saved state than with the live context, the state is restored
first. Entries are kept in least-recently-used order within a byte budget. With a draft model,
its context is saved and restored alongside (else a switch would re-prefill the whole
conversation in the draft model). The generator calls ``prepare`` before each reply (the app,
the CLI, the server and the benchmarks alike); only the thread that owns the contexts touches
this object. A cache belongs to one model and context size: a new ``Runtime`` starts empty.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from engine.cache.kv_store import MIN_NEW_TOKENS, KVStore
from engine.cache.prefix import common_prefix, dropped_span
from engine.errors import DecodeError
from engine.llama.context import LlamaSequence

log = logging.getLogger(__name__)

Snapshot = tuple[tuple[int, ...], memoryview]  # the tokens a context held, and its saved state
MIN_SAVE = 64  # a live context is saved only when a request would discard at least this many tokens
# 1 GiB: about 18 states of a 2,000-token conversation of a 1.5B model (~57 MB each; ~28 KB of
# KV a token in f16), or 4 full 8k contexts: room for the few recent conversations and reply
# versions a person moves between, small next to the memory that runs such a model. Memory is
# taken only as states are saved, and freed with the model.
DEFAULT_CACHE_BYTES = 1 << 30


@dataclass
class CacheStats:
    requests: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens not decoded again (live context or restored state)
    hits: int = 0  # requests that reused at least one token beyond the shared template start
    restores: int = 0
    disk_restores: int = 0
    saves: int = 0
    evictions: int = 0
    unsaved: int = 0  # states not saved: reading their tokens again costs less here (a GPU)
    restore_s: float = 0.0
    save_s: float = 0.0

    def to_json(self, entries: int, used_bytes: int, max_bytes: int) -> dict:
        d = dict(self.__dict__)
        d.update(hit_rate=round(self.hits / self.requests, 4) if self.requests else 0.0,
                 token_hit_rate=round(self.reused_tokens / self.prompt_tokens, 4)
                 if self.prompt_tokens else 0.0,
                 restore_s=round(self.restore_s, 4), save_s=round(self.save_s, 4),
                 entries=entries, bytes=used_bytes, max_bytes=max_bytes)
        return d


class StateCache:
    """``disk``: the disk KV store under this cache (engine.cache.kv_store), asked when memory holds
    less of a prompt, and given each prompt whose reading cost enough to keep."""

    def __init__(self, max_bytes: int, disk: KVStore | None = None) -> None:
        self.max_bytes = max_bytes
        self.disk = disk
        # id -> one (tokens, state) per context, the target's first
        self._entries: OrderedDict[int, tuple[Snapshot, ...]] = OrderedDict()
        self._next_id = 0
        self.used_bytes = 0
        self.stats = CacheStats()
        self.save_s_per_token: float | None = None  # what the last save took

    def __len__(self) -> int:
        return len(self._entries)

    def prepare(self, ctxs: Sequence[LlamaSequence], prompt: Sequence[int],
                read_s_per_token: float | None = None) -> int:
        """Make the target ``ctxs[0]`` (and a draft ``ctxs[1]``) hold the best available prefix
        of ``prompt``; return its length. ``read_s_per_token``: what reading a prompt token
        costs here, measured; the live state is not saved where its last save cost more per
        token (a GPU copies a sequence out one run of cells at a time, and sequences decoded
        together interleave theirs: a newcomer on an H200 waited 0.10 s for such a save of a
        580-token conversation, 0.01 s without it, docs/benchmarks/gpu.md)."""
        target = ctxs[0]
        live = common_prefix(target.tokens, prompt)
        shift = dropped_span(target.tokens, prompt)  # a cache shift keeps the turns after it
        if target.n_past - live >= MIN_SAVE and self.max_bytes > 0 and shift is None:
            if read_s_per_token is None or self.save_s_per_token is None \
                    or self.save_s_per_token < read_s_per_token:
                self._save(ctxs)  # first: saving may evict
            else:
                self.stats.unsaved += 1
        # what the live context keeps, counting what a shift keeps: a saved state must beat
        # that, not the shared head alone (past the context's edge, any state that shares the
        # template's next few tokens did, and the turns a shift keeps were read again)
        held = live if shift is None else shift[0] + shift[2]
        best_id, best = None, held
        for key, entry in self._entries.items():
            n = common_prefix(entry[0][0], prompt)
            if n > best:
                best_id, best = key, n
        if self.disk is not None and self._from_disk(ctxs, prompt, best):
            return common_prefix(target.tokens, prompt)
        if best_id is None:
            return live
        if not self._restore(ctxs, best_id):
            return common_prefix(target.tokens, prompt)  # nothing (the failed restore cleared it)
        return best

    def prefilled(self, ctxs: Sequence[LlamaSequence], n_read: int) -> None:
        """A prompt was read into ``ctxs``, ``n_read`` of its tokens computed (not reused):
        the disk store keeps it when that was long enough to be worth a file."""
        if self.disk is not None and n_read >= MIN_NEW_TOKENS:
            self.disk.save(ctxs[:1])  # the target's (a draft model reads the prompt later)

    def _from_disk(self, ctxs: Sequence[LlamaSequence], prompt: Sequence[int], held: int) -> bool:
        """Restore the disk's entry for ``prompt`` when it holds more than memory does (by at
        least MIN_SAVE tokens: a file's read is not worth a few tokens)."""
        assert self.disk is not None
        n, entry = self.disk.best(prompt)
        if entry is None or n < held + MIN_SAVE:
            return False
        t = time.perf_counter()
        ok = self.disk.restore(ctxs[:1], entry)  # a draft model reads what it lacks itself
        if ok:
            self.stats.restore_s += time.perf_counter() - t
            self.stats.disk_restores += 1
            log.debug("restored a state of %d tokens from disk", len(entry.tokens))
        return True

    def covers(self, tokens: Sequence[int]) -> int:
        """The longest prefix of ``tokens`` a saved state holds (nothing is restored)."""
        return max((common_prefix(entry[0][0], tokens) for entry in self._entries.values()),
                   default=0)

    def keep(self, ctx: LlamaSequence) -> None:
        """Save what ``ctx`` holds (before something else is loaded into it), if worth it."""
        if ctx.n_past >= MIN_SAVE and self.max_bytes > 0:
            self._save([ctx])

    def record(self, n_prompt: int, n_reused: int, n_template: int) -> None:
        """Count one request: ``n_reused`` of ``n_prompt`` tokens came from the cache; reusing
        no more than the ``n_template`` tokens every prompt starts with is not a hit."""
        s = self.stats
        s.requests += 1
        s.prompt_tokens += n_prompt
        s.reused_tokens += n_reused
        s.hits += n_reused > n_template

    def to_json(self) -> dict:
        return self.stats.to_json(len(self._entries), self.used_bytes, self.max_bytes)

    def clear(self) -> None:
        """Forget every saved state (their memory is freed)."""
        self._entries.clear()
        self.used_bytes = 0

    # -- internals ------------------------------------------------------------------------
    def _save(self, ctxs: Sequence[LlamaSequence]) -> None:
        tokens = tuple(ctxs[0].tokens)
        for key, entry in list(self._entries.items()):
            old = entry[0][0]
            if common_prefix(old, tokens) == len(old):  # the same conversation, now longer
                self._drop(key)
        t = time.perf_counter()
        entry = tuple((tuple(ctx.tokens), ctx.state_bytes()) for ctx in ctxs)
        elapsed = time.perf_counter() - t
        self.stats.save_s += elapsed
        self.save_s_per_token = elapsed / max(len(tokens), 1)
        size = _size(entry)
        if size > self.max_bytes:
            log.info("a state of %d tokens (%d bytes) exceeds the cache budget", len(tokens), size)
            return
        self._entries[self._next_id] = entry
        self._next_id += 1
        self.used_bytes += size
        self.stats.saves += 1
        while self.used_bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
            self.stats.evictions += 1
        log.debug("saved a state of %d tokens (%d bytes)", len(tokens), size)

    def _restore(self, ctxs: Sequence[LlamaSequence], key: int) -> bool:
        entry = self._entries[key]
        t = time.perf_counter()
        for i, (ctx, (tokens, data)) in enumerate(zip(ctxs, entry)):
            if not tokens:
                ctx.clear()
                continue
            try:
                ctx.load_state(data, tokens)
            except DecodeError as e:  # load_state left the context empty
                log.warning("a saved conversation state could not be restored (%s)", e)
                if i == 0:
                    self._drop(key)
                    return False
        self.stats.restore_s += time.perf_counter() - t
        self.stats.restores += 1
        self._entries.move_to_end(key)
        log.debug("restored a state of %d tokens", len(entry[0][0]))
        return True

    def _drop(self, key: int) -> None:
        self.used_bytes -= _size(self._entries.pop(key))


def _size(entry: tuple[Snapshot, ...]) -> int:
    return sum(len(data) for _, data in entry)
