"""Verify-cost curves measured after the load, a step at a time, while the model already answers.

A runtime built with ``measure=False`` (the app) starts with the curves it finds cached; its
speculations without one decode plainly (drafting changes only how many tokens a pass checks,
never which tokens come out). ``LaterCurves`` measures what is missing on small contexts of its
own (the conversations' caches are never touched), one decode per ``step`` so that the engine's
thread runs it only while no reply waits, caches each curve, and gives them to the speculations.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import replace

from engine.decode.speculative import calibration
from engine.decode.speculative.calibration import Measurement
from engine.decode.speculative.controller import CostModel
from engine.decode.speculative.draft_model import CURVE_SIZES, draft_costs
from engine.decode.speculative.speculator import Speculation
from engine.decode.speculative.tuning import TUNING
from engine.llama.context import LlamaSequence

log = logging.getLogger(__name__)


class LaterCurves:
    """The curves ``speculations`` lack (the target's over ``ctx``, a draft model's over its
    context), measured in ``total`` steps. Owned by the thread that owns the contexts."""

    def __init__(self, ctx: LlamaSequence, speculations: Sequence[Speculation | None]) -> None:
        self.waiting = [s for s in speculations if s is not None and s.cost is None]
        draft_ctx = next((s.draft_ctx for s in self.waiting if s.draft_ctx is not None), None)
        wanted: list[tuple[LlamaSequence, tuple[int, ...]]] = [(ctx, TUNING.calibration_sizes)]
        if draft_ctx is not None:
            wanted.append((draft_ctx, CURVE_SIZES))
        self.curves: dict[tuple[int, ...], CostModel] = {}
        self.todo: list[tuple[LlamaSequence, tuple[int, ...]]] = []
        for c, sizes in wanted:
            cost = calibration.lookup(c, sizes)
            if cost is not None:
                self.curves[sizes] = cost
            else:
                self.todo.append((c, sizes))
        self.total = sum(steps(sizes) for _, sizes in self.todo)
        self.done = 0
        self._measuring: tuple[LlamaSequence, Measurement] | None = None
        if not self.todo:
            self._give()

    @property
    def finished(self) -> bool:
        return not self.todo and self._measuring is None

    def step(self, cancel: threading.Event | None = None) -> bool:
        """One decode of the measurement; False once every curve is measured and given.
        ``cancel`` (the engine's ``preempt``: a request arrived) stops the decode under way, so
        that the request never waits for the measurement; that step runs again later."""
        if self.finished:
            return False
        if self._measuring is None:
            key_ctx, sizes = self.todo[0]
            params = replace(key_ctx.params, n_ctx=TUNING.calibration_depth + max(sizes),
                             n_parallel=1)
            own = LlamaSequence(key_ctx.model, params)
            self._measuring = (own, Measurement(own, sizes))
        own, measurement = self._measuring
        if not measurement.step(cancel):
            return True
        self.done += 1
        if measurement.result is not None:
            _, sizes = self.todo.pop(0)
            calibration.store(own, measurement.result, sizes)  # same key as the real context's
            self.curves[sizes] = measurement.result
            self._measuring = None
            own.close()
            if not self.todo:
                self._give()
                return False
        return True

    def _give(self) -> None:
        cost = self.curves[TUNING.calibration_sizes]
        draft = self.curves.get(CURVE_SIZES)
        for spec in self.waiting:
            if spec.draft_ctx is not None and draft is not None:
                spec.set_cost(cost, *draft_costs(draft))
            else:
                spec.set_cost(cost)
        log.info("verify cost measured: %s", cost.verify_s)

    def close(self) -> None:
        """Abandon the measurement (its context is freed; nothing is cached)."""
        if self._measuring is not None:
            self._measuring[0].close()
            self._measuring = None
        self.todo = []


def steps(sizes: Sequence[int], repeats: int = TUNING.calibration_repeats) -> int:
    """The steps of a measurement over a context of ``calibration_depth + max(sizes)``."""
    return -(-TUNING.calibration_depth // Measurement.WARMUP_SLICE) + repeats * len(set(sizes))
