"""The verify-cost curve: what one target pass over n tokens costs on this machine. Measured once
per model, settings, machine, llama.cpp build and RPC layout (about a minute for a 1.5B on two
cores), then cached in ``cache_dir()/verify-cost.json`` as ``[[n, seconds], ...]`` per key; what
passes cost now is followed by ``engine.decode.speculative.controller.CostTrack``.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from engine import paths
from engine.decode.speculative.controller import CostModel
from engine.decode.speculative.tuning import TUNING
from engine.errors import DecodeError
from engine.llama.backend import _pkg, build_id
from engine.llama.context import LlamaSequence
from engine.localfile import read_json, write_json

log = logging.getLogger(__name__)


def _cache_file() -> Path:
    return paths.cache_dir() / "verify-cost.json"


def _cache_key(ctx: LlamaSequence, sizes: Sequence[int]) -> str:
    """The model file, settings, machine, llama.cpp build and RPC layout the curve depends on."""
    st = ctx.model.path.stat()
    spec = ctx.model.spec
    key = [str(ctx.model.path), st.st_size, st.st_mtime_ns, ctx.params.threads(),
           spec.n_gpu_layers, ctx.params.type_k, ctx.params.flash_attn, ctx.params.exact,
           spec.repack, list(sizes), TUNING.calibration_depth, os.cpu_count(),
           getattr(_pkg, "__version__", "?"), build_id()]
    if spec.rpc:
        key.append({"rpc": list(spec.rpc), "tensor_split": list(spec.tensor_split)})
    return json.dumps(key)


def _check_cost_cache(obj: object) -> None:
    if not isinstance(obj, dict):
        raise ValueError("it is not an object")


def curve_from_points(raw: object) -> CostModel:
    """A cached curve, ``[[n, seconds], ...]``; ValueError on anything else."""
    if not isinstance(raw, list) or not all(isinstance(p, list) and len(p) == 2 and type(p[0]) is int
                                            and type(p[1]) in (int, float) for p in raw):
        raise ValueError("not a list of [batch size, seconds]")
    return CostModel(tuple((n, float(s)) for n, s in raw))


def lookup(ctx: LlamaSequence, sizes: Sequence[int] = TUNING.calibration_sizes) -> CostModel | None:
    """The cached verify-cost curve of ``ctx``'s model here, or None (never measured, or bad)."""
    entries = read_json(_cache_file(), _check_cost_cache) or {}
    raw = entries.get(_cache_key(ctx, sizes))
    try:  # a string is the format before 2026-11-27 (a JSON document): measured again
        cost = curve_from_points(raw) if raw is not None and not isinstance(raw, str) else None
    except ValueError as e:
        log.warning("ignoring a bad cached verify cost: %s", e)
        return None
    if cost is not None and [n for n, _ in cost.verify_s] != sorted(set(sizes)):
        log.warning("ignoring a cached verify cost measured at other batch sizes")
        return None
    return cost


def store(ctx: LlamaSequence, cost: CostModel, sizes: Sequence[int] = TUNING.calibration_sizes) -> None:
    """Cache ``cost`` as the curve of ``ctx``'s model and settings here."""
    entries = read_json(_cache_file(), _check_cost_cache) or {}
    try:
        kept = {k: v for k, v in entries.items() if not isinstance(v, str)}  # old-format entries go
        write_json(_cache_file(), {**kept, _cache_key(ctx, sizes): [list(p) for p in cost.verify_s]}, durable=False)
    except (OSError, ValueError) as e:
        log.warning("could not cache the verify cost: %s", e)


def cached_cost(ctx: LlamaSequence, sizes: Sequence[int] = TUNING.calibration_sizes,
                on_measure: Callable[[], None] | None = None) -> CostModel:
    """The verify-cost curve of ``ctx``'s model here; ``on_measure`` is called before measuring."""
    cost = lookup(ctx, sizes)
    if cost is not None:
        return cost
    if on_measure is not None:
        on_measure()
    cost = measure_cost(ctx, sizes)
    store(ctx, cost, sizes)
    return cost


def measure_cost(ctx: LlamaSequence, sizes: Sequence[int] = TUNING.calibration_sizes) -> CostModel:
    """Time target decodes of n tokens (all logits, as in verification) after
    ``calibration_depth`` tokens of context (less in a small context); the context is cleared."""
    measurement = Measurement(ctx, sizes)
    try:
        while True:
            measurement.step()
            if measurement.result is not None:
                return measurement.result
    finally:
        ctx.clear()


class Measurement:
    """``measure_cost`` in steps of one decode each (the warm-up in slices of ``WARMUP_SLICE``
    tokens), so that a thread can do other work between two steps: ``step()`` until ``result``
    is set. It clears ``ctx`` first, then owns it (its context) until it is done."""

    # a warm-up slice is no larger than the largest batch the target's curve times, so a reply
    # waits for at most one decode of a size the measurement makes anyway
    WARMUP_SLICE = max(TUNING.calibration_sizes)

    def __init__(self, ctx: LlamaSequence, sizes: Sequence[int] = TUNING.calibration_sizes,
                 repeats: int = TUNING.calibration_repeats) -> None:
        if repeats < 1 or 1 not in sizes:
            raise ValueError("calibration needs repeats >= 1 and the size 1")
        self.ctx = ctx
        self.order = sorted(set(int(s) for s in sizes))
        self.depth = max(1, min(TUNING.calibration_depth, ctx.n_ctx - max(self.order)))
        self.filler = [ctx.model.bos if ctx.model.bos >= 0 else 1] + \
            [100 + i for i in range(self.depth + max(self.order))]
        self.times: dict[int, list[float]] = {n: [] for n in self.order}
        self.runs = [n for _ in range(repeats) for n in self.order]  # the sizes taking turns
        self.warmup = -(-self.depth // self.WARMUP_SLICE)
        self.total = self.warmup + len(self.runs)
        self.done = 0
        self.result: CostModel | None = None
        ctx.clear()

    def step(self, cancel: threading.Event | None = None) -> bool:
        """One slice of the warm-up (context to attend to), or one timed decode; False when
        ``cancel`` stopped it (nothing counted: the same step runs again next time)."""
        ctx = self.ctx
        if self.result is not None:
            return True
        try:
            if self.done < self.warmup:
                start = self.done * self.WARMUP_SLICE
                ctx.decode(self.filler[start:min(start + self.WARMUP_SLICE, self.depth)],
                           cancel=cancel)
            else:
                n = self.runs[self.done - self.warmup]
                t = time.perf_counter()
                ctx.decode(self.filler[self.depth:self.depth + n], logits="all", cancel=cancel)
                ctx.logits_rows()
                self.times[n].append(time.perf_counter() - t)
                ctx.rewind(self.depth)
        except DecodeError:
            if cancel is None or not cancel.is_set():
                raise
            return False  # (a cancelled pass leaves the context as it was)
        self.done += 1
        if self.done == self.total:
            self.result = CostModel(tuple((n, statistics.median(self.times[n])) for n in self.order))
            log.debug("calibrated verify cost: %s", self.result.verify_s)
        return True


def forget(ctx: LlamaSequence | None, sizes: Sequence[int] = TUNING.calibration_sizes) -> None:
    """Drop the cached curve of ``ctx`` (every curve for None): measured again at the next load."""
    entries = read_json(_cache_file(), _check_cost_cache) or {}
    kept = {k: v for k, v in entries.items() if ctx is not None and k != _cache_key(ctx, sizes)}
    if len(kept) != len(entries):
        try:
            write_json(_cache_file(), kept, durable=False)
        except (OSError, ValueError) as e:
            log.warning("could not update the verify-cost cache: %s", e)
