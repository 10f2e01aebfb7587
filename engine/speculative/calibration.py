"""The verify-cost curve: what one target pass over n tokens costs on this machine. Measured once
per model, settings, machine, llama.cpp build and RPC layout (about a minute for a 1.5B on two
cores), then cached in ``cache_dir()/verify-cost.json``; ``CostTrack`` follows what passes cost
now, and has a curve far from it (taken on a busy machine) measured again at the next load.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from engine import paths
from engine.context import Context
from engine.localfile import read_json, write_json
from engine.speculative.controller import CostModel
from engine.speculative.tuning import TUNING

log = logging.getLogger(__name__)


def _cache_file() -> Path:
    return paths.cache_dir() / "verify-cost.json"


def _cache_key(ctx: Context, sizes: Sequence[int]) -> str:
    """The model file, settings, machine, llama.cpp build and RPC layout the curve depends on."""
    from engine.backend import _pkg

    st = ctx.model.path.stat()
    spec = ctx.model.spec
    key = [str(ctx.model.path), st.st_size, st.st_mtime_ns, ctx.params.threads(),
           spec.n_gpu_layers, ctx.params.type_k, ctx.params.flash_attn,
           list(sizes), TUNING.calibration_depth, os.cpu_count(), getattr(_pkg, "__version__", "?")]
    if spec.rpc:
        key.append({"rpc": list(spec.rpc), "tensor_split": list(spec.tensor_split)})
    return json.dumps(key)


def _check_cost_cache(obj: object) -> None:
    if not isinstance(obj, dict):
        raise ValueError("it is not an object")


def lookup(ctx: Context, sizes: Sequence[int] = TUNING.calibration_sizes) -> CostModel | None:
    """The cached verify-cost curve of ``ctx``'s model here, or None (never measured, or bad)."""
    entries = read_json(_cache_file(), _check_cost_cache) or {}
    text = entries.get(_cache_key(ctx, sizes))
    if isinstance(text, str):
        try:
            cost = CostModel.from_json(text)
            if [n for n, _ in cost.verify_s] == sorted(set(sizes)):
                return cost
            log.warning("ignoring a cached verify cost measured at other batch sizes")
        except ValueError as e:
            log.warning("ignoring a bad cached verify cost: %s", e)
    return None


def store(ctx: Context, cost: CostModel, sizes: Sequence[int] = TUNING.calibration_sizes) -> None:
    """Cache ``cost`` as the curve of ``ctx``'s model and settings here."""
    entries = read_json(_cache_file(), _check_cost_cache) or {}
    try:
        write_json(_cache_file(), {**entries, _cache_key(ctx, sizes): cost.to_json()}, durable=False)
    except (OSError, ValueError) as e:
        log.warning("could not cache the verify cost: %s", e)


def cached_cost(ctx: Context, sizes: Sequence[int] = TUNING.calibration_sizes,
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


def measure_cost(ctx: Context, sizes: Sequence[int] = TUNING.calibration_sizes) -> CostModel:
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

    def __init__(self, ctx: Context, sizes: Sequence[int] = TUNING.calibration_sizes,
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

    def step(self) -> None:
        """One slice of the warm-up (context to attend to), or one timed decode."""
        ctx = self.ctx
        if self.result is not None:
            return
        if self.done < self.warmup:
            start = self.done * self.WARMUP_SLICE
            ctx.decode(self.filler[start:min(start + self.WARMUP_SLICE, self.depth)])
        else:
            n = self.runs[self.done - self.warmup]
            t = time.perf_counter()
            ctx.decode(self.filler[self.depth:self.depth + n], logits="all")
            ctx.logits_rows()
            self.times[n].append(time.perf_counter() - t)
            ctx.rewind(self.depth)
        self.done += 1
        if self.done == self.total:
            self.result = CostModel(tuple((n, statistics.median(self.times[n])) for n in self.order))
            log.debug("calibrated verify cost: %s", self.result.verify_s)


def forget_all() -> None:
    """Drop every cached curve (each is measured again at its model's next load)."""
    forget(None)


def forget(ctx: Context | None, sizes: Sequence[int] = TUNING.calibration_sizes) -> None:
    """Drop the cached curve of ``ctx`` (every curve for None): measured again at the next load."""
    entries = read_json(_cache_file(), _check_cost_cache) or {}
    kept = {k: v for k, v in entries.items() if ctx is not None and k != _cache_key(ctx, sizes)}
    if len(kept) != len(entries):
        try:
            write_json(_cache_file(), kept, durable=False)
        except (OSError, ValueError) as e:
            log.warning("could not update the verify-cost cache: %s", e)


class CostTrack:
    """What passes cost now against the curve. Its shape drifts within a day (a 2-token pass at
    1.6 steps in a cached curve, 1.9 an hour later, a single step unchanged:
    docs/benchmarks/speculative.md, "The curve's shape drifts"), so lengths are chosen by
    ``cost``: the curve with its single step scaled by the median of measured / predicted over
    the last ``cost_check_passes`` lone steps, and each batch size by that times the median of
    its own last passes' ratio over the steps' at the time (its shape), once
    ``calibration_repeats`` of them were timed (one hiccup in that many moves nothing); a size
    not timed that often takes the shape of the nearest size that was (a batch departs from the
    curve as its neighbours do), the step's before any. A spell that slows every pass alike
    (a cold start, a neighbour on the cores) passes with the steps, which never stop, even where
    it stops drafting. ``on_mismatch(ratio)`` is called once when the steps' or the batches'
    median over that many passes is off by more than ``cost_check_factor`` (a curve taken on a
    busy machine): the cached curve is then measured again at the next load."""

    def __init__(self, curve: CostModel, on_mismatch: Callable[[float], None] | None = None) -> None:
        self.curve = self.cost = curve
        self.on_mismatch, self.reported = on_mismatch, False
        self.steps = deque[float](maxlen=TUNING.cost_check_passes)
        self.batches = deque[float](maxlen=TUNING.cost_check_passes)
        self.shapes = {n: deque[float](maxlen=TUNING.cost_check_passes) for n, _ in curve.verify_s if n > 1}
        self._step, self._shape = 1.0, {n: 1.0 for n, _ in curve.verify_s}  # what ``cost`` was built with

    def observe(self, n_tokens: int, seconds: float) -> None:
        """One pass over ``n_tokens`` that took ``seconds``, nothing else in it."""
        if seconds <= 0:
            return
        ratio = seconds / self.curve.verify_cost(n_tokens)
        shape = self._shape
        if n_tokens == 1:
            self.steps.append(ratio)
            step = statistics.median(self.steps)
        else:
            step = self._step
            self.batches.append(ratio)
            if n_tokens in self.shapes:
                self.shapes[n_tokens].append(ratio / step)
                timed = {n: statistics.median(r) for n, r in self.shapes.items()
                         if len(r) >= TUNING.calibration_repeats}
                shape = {n: 1.0 if n == 1 or not timed else timed[min(timed, key=lambda m: abs(math.log(m / n)))]
                         for n in shape}
        if step != self._step or shape != self._shape:  # rebuilt only where a median moved
            self._step, self._shape = step, shape
            self.cost = CostModel(tuple((n, t * step * shape[n]) for n, t in self.curve.verify_s),
                                  self.curve.draft_s_per_token, self.curve.draft_s_per_pass)
        self._check()

    def _check(self) -> None:
        if self.reported or self.on_mismatch is None:
            return
        full = [statistics.median(r) for r in (self.steps, self.batches) if len(r) == r.maxlen]
        off = [r for r in full if not 1 / TUNING.cost_check_factor <= r <= TUNING.cost_check_factor]
        if off:
            self.reported = True
            self.on_mismatch(off[0])
