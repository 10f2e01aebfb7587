"""The verify-cost curve: what one target pass over n tokens costs on this machine.

Measured once per model, settings, machine, llama.cpp build and RPC layout, then cached in
``cache_dir()/verify-cost.json``. Measuring takes a while (seconds on a small model, about a
minute for a 1.5B on two cores), so a caller can show progress (``on_measure``). A curve taken
on a busy machine misleads the controller for good: ``CostCheck`` compares it with what passes
really cost, and a curve that is far off is forgotten, to be measured again at the next load;
``forget_all`` does that on request (the app's settings).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

from engine import paths
from engine.context import Context
from engine.localfile import read_json, write_json
from engine.speculative.controller import CostModel, calibrate

log = logging.getLogger(__name__)

CALIBRATION_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
# Batches are timed after this many tokens of context: attention over a few hundred tokens makes
# a long batch dearer relative to one step, and a curve measured at the start of a context
# drafts too long in the middle of a real conversation (simulated: about 10% slower on the edit
# prompts).
CALIBRATION_DEPTH = 512
def _cache_file() -> Path:
    return paths.cache_dir() / "verify-cost.json"


def _cache_key(ctx: Context, sizes: Sequence[int]) -> str:
    """What the curve depends on: the model file, the settings, the machine, the build of
    llama.cpp (another build has other kernels, and batches cost differently) and the RPC
    layout (remote layers add network round trips to every pass; the curve is measured on the
    real layout, so they are in it)."""
    from engine.backend import _pkg

    st = ctx.model.path.stat()
    spec = ctx.model.spec
    key = [str(ctx.model.path), st.st_size, st.st_mtime_ns, ctx.params.threads(),
           spec.n_gpu_layers, ctx.params.type_k, ctx.params.flash_attn,
           list(sizes), CALIBRATION_DEPTH, os.cpu_count(), getattr(_pkg, "__version__", "?")]
    if spec.rpc:
        key.append({"rpc": list(spec.rpc), "tensor_split": list(spec.tensor_split)})
    return json.dumps(key)


def cached_cost(ctx: Context, sizes: Sequence[int] = CALIBRATION_SIZES,
                on_measure: Callable[[], None] | None = None) -> CostModel:
    """The verify-cost curve of ``ctx``'s model on this machine (measured once, then cached).
    ``on_measure`` is called before a measurement (not when the curve is cached)."""
    key = _cache_key(ctx, sizes)
    entries = read_json(_cache_file(), _check_cost_cache) or {}
    if isinstance(entries.get(key), str):
        try:
            return CostModel.from_json(entries[key])
        except ValueError as e:
            log.warning("ignoring a bad cached verify cost: %s", e)
    if on_measure is not None:
        on_measure()
    cost = measure_cost(ctx, sizes)
    try:
        write_json(_cache_file(), {**entries, key: cost.to_json()}, durable=False)
    except (OSError, ValueError) as e:
        log.warning("could not cache the verify cost: %s", e)
    return cost


def _check_cost_cache(obj: object) -> None:
    if not isinstance(obj, dict):
        raise ValueError("it is not an object")


def measure_cost(ctx: Context, sizes: Sequence[int] = CALIBRATION_SIZES, repeats: int = 3) -> CostModel:
    """Time target decodes of n tokens (all logits, as in verification) after
    ``CALIBRATION_DEPTH`` tokens of context (less in a small context)."""
    saved = list(ctx.tokens)
    ctx.clear()
    depth = max(1, min(CALIBRATION_DEPTH, ctx.n_ctx - max(sizes)))
    filler = [ctx.model.bos if ctx.model.bos >= 0 else 1] + [100 + i for i in range(depth + max(sizes))]
    ctx.decode(filler[:depth])  # warm-up, and context to attend to

    def measure(n: int) -> float:
        t = time.perf_counter()
        ctx.decode(filler[depth:depth + n], logits="all")
        ctx.logits_rows()
        dt = time.perf_counter() - t
        ctx.rewind(depth)
        return dt

    try:
        return calibrate(measure, sizes, repeats)
    finally:
        ctx.clear()
        if saved:
            log.debug("calibration cleared a cached prompt of %d tokens", len(saved))


def forget(ctx: Context, sizes: Sequence[int] = CALIBRATION_SIZES) -> None:
    """Drop the cached curve of ``ctx`` (measured again at the next load)."""
    _drop(lambda key: key == _cache_key(ctx, sizes))


def forget_all() -> None:
    """Drop every cached curve (each is measured again at its model's next load)."""
    _drop(lambda key: True)


def _drop(which: Callable[[str], bool]) -> None:
    entries = read_json(_cache_file(), _check_cost_cache) or {}
    kept = {k: v for k, v in entries.items() if not which(k)}
    if len(kept) != len(entries):
        try:
            write_json(_cache_file(), kept, durable=False)
        except (OSError, ValueError) as e:
            log.warning("could not update the verify-cost cache: %s", e)


class CostCheck:
    """Compares the curve with what verification passes really cost. After ``MIN_PASSES``
    passes, a median ratio (measured / predicted) outside [1/FACTOR, FACTOR] means the curve
    was taken under other conditions (another program was using the cores): ``on_mismatch`` is
    called once. FACTOR 2: the machine's own drift between runs is about 10%, and a curve off
    by less than 2x changes the chosen draft lengths little."""

    MIN_PASSES = 16
    FACTOR = 2.0

    def __init__(self, cost: CostModel, on_mismatch: Callable[[float], None]) -> None:
        self.cost = cost
        self.on_mismatch = on_mismatch
        self.ratios: list[float] = []
        self.reported = False

    def observe(self, n_tokens: int, seconds: float) -> None:
        if self.reported or seconds <= 0:
            return
        self.ratios.append(seconds / self.cost.verify_cost(n_tokens))
        if len(self.ratios) >= self.MIN_PASSES:
            ratio = statistics.median(self.ratios[-self.MIN_PASSES:])
            if not 1 / self.FACTOR <= ratio <= self.FACTOR:
                self.reported = True
                self.on_mismatch(ratio)
