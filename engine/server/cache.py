"""Saved KV states of recent conversations, so that clients taking turns do not re-prefill.

The context holds one conversation at a time; the generator reuses the longest common prefix of
what it holds. Before a request would throw away a long stretch of the live context (another
client's conversation arrives), that state is saved here; when a request's prompt shares more
with a saved state than with the live context, the state is restored first. Entries are kept in
least-recently-used order within a byte budget. Only the engine thread touches this object.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

from engine.context import Context
from engine.errors import DecodeError
from engine.generate import common_prefix

log = logging.getLogger(__name__)

MIN_SAVE = 64  # a live context is saved only when a request would discard at least this many tokens


@dataclass
class CacheStats:
    requests: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens not decoded again (live context or restored state)
    hits: int = 0  # requests that reused at least one token beyond the shared template start
    restores: int = 0
    saves: int = 0
    evictions: int = 0
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
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, tuple[tuple[int, ...], memoryview]] = OrderedDict()
        self._next_id = 0
        self.used_bytes = 0
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._entries)

    def prepare(self, ctx: Context, prompt: Sequence[int]) -> int:
        """Make ``ctx`` hold the best available prefix of ``prompt``; return its length."""
        live = common_prefix(ctx.tokens, prompt)
        best_id, best = None, live
        for key, (tokens, _) in self._entries.items():
            n = common_prefix(tokens, prompt)
            if n > best:
                best_id, best = key, n
        if ctx.n_past - live >= MIN_SAVE and self.max_bytes > 0:
            self._save(ctx)
        if best_id is not None:
            if self._restore(ctx, best_id):
                live = best
        return live

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

    # -- internals ------------------------------------------------------------------------
    def _save(self, ctx: Context) -> None:
        tokens = tuple(ctx.tokens)
        for key, (old, _) in list(self._entries.items()):
            if common_prefix(old, tokens) == len(old):  # the same conversation, now longer
                self._drop(key)
        t = time.perf_counter()
        data = ctx.state_bytes()
        self.stats.save_s += time.perf_counter() - t
        if len(data) > self.max_bytes:
            log.info("a state of %d tokens (%d bytes) exceeds the cache budget", len(tokens), len(data))
            return
        self._entries[self._next_id] = (tokens, data)
        self._next_id += 1
        self.used_bytes += len(data)
        self.stats.saves += 1
        while self.used_bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
            self.stats.evictions += 1
        log.debug("saved a state of %d tokens (%d bytes)", len(tokens), len(data))

    def _restore(self, ctx: Context, key: int) -> bool:
        tokens, data = self._entries[key]
        t = time.perf_counter()
        try:
            ctx.load_state(data, tokens)
        except DecodeError as e:
            log.warning("a saved conversation state could not be restored (%s); dropped", e)
            self._drop(key)
            return False
        self.stats.restore_s += time.perf_counter() - t
        self.stats.restores += 1
        self._entries.move_to_end(key)
        log.debug("restored a state of %d tokens", len(tokens))
        return True

    def _drop(self, key: int) -> None:
        _, data = self._entries.pop(key)
        self.used_bytes -= len(data)
