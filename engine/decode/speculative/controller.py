"""How much to draft: the length with the most expected tokens per second.

A pass verifying k drafted tokens costs ``pass_cost(k)`` (the verify-cost curve measured on this
machine, engine.decode.speculative.calibration) and emits ``1 + sum(survival[:k])`` tokens on average,
``survival[j-1]`` being P(the first j drafted tokens are accepted; ``CopyOdds`` for a copy): on a
2-core CPU only near-certain copies pay, on a GPU (a batch costs about one step) long guesses do.
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.decode.speculative.tuning import TUNING, Tuning

__all__ = ["CopyOdds", "CostModel", "CostTrack", "best_length"]


@dataclass(frozen=True)
class CostModel:
    """Seconds of one target decode of n tokens, measured at some sizes (1 among them; linear
    between points, the last segment's slope past them, ``n * t1`` with one point), plus what
    drafting costs per draft token and per pass (a draft model takes in each correction)."""

    verify_s: tuple[tuple[int, float], ...]
    draft_s_per_token: float = 0.0
    draft_s_per_pass: float = 0.0

    def __post_init__(self) -> None:
        points = tuple(sorted((int(n), float(s)) for n, s in self.verify_s))
        sizes = [n for n, _ in points]
        if not sizes or sizes[0] != 1 or len(set(sizes)) != len(sizes):
            raise ValueError(f"calibration sizes must be distinct and include 1: {sizes}")
        if not all(math.isfinite(s) and s > 0 for _, s in points) or not all(
                math.isfinite(s) and s >= 0 for s in (self.draft_s_per_token, self.draft_s_per_pass)):
            raise ValueError("costs must be finite, and times of a decode positive")
        object.__setattr__(self, "verify_s", points)

    def verify_cost(self, n_tokens: int) -> float:
        """Seconds to decode ``n_tokens`` (>= 1) target tokens in one batch."""
        if n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        pts = self.verify_s
        if len(pts) == 1:
            return pts[0][1] * n_tokens
        for (n0, s0), (n1, s1) in zip(pts, pts[1:], strict=False):
            if n_tokens <= n1:
                return s0 + (s1 - s0) * (n_tokens - n0) / (n1 - n0)
        (n0, s0), (n1, s1) = pts[-2], pts[-1]
        return s1 + max(0.0, (s1 - s0) / (n1 - n0)) * (n_tokens - n1)

    def pass_cost(self, k: int, width: int = 0) -> float:
        """Seconds of one pass that verifies k drafted tokens (k = 0: a plain step) beside
        ``width`` tokens of other sequences in the same batch. A batch's cost is taken to depend
        on its number of tokens, whichever sequences they belong to (the weights are read once
        per batch either way; attention over each sequence's own cache is the small part)."""
        if k == 0:
            return self.verify_cost(width + 1)
        return self.verify_cost(width + k + 1) + k * self.draft_s_per_token + self.draft_s_per_pass


def best_length(cost: CostModel, survival: Sequence[float], width: int = 0) -> int:
    """The draft length with the most expected tokens per second given ``survival``, or 0 where
    plain decoding does as well. Only calibrated batch sizes are tried (and the whole draft when
    it is shorter than the largest): between them the cost of a batch is not known.

    ``width``: tokens other sequences already put in this pass (several clients at once); each
    is counted as one token they emit, and the rate is the whole batch's. A wide batch makes a
    draft token dearer where the cost grows with the batch (a CPU) and leaves it cheap where it
    does not (a GPU); with width 0 this is the lone sequence's choice."""
    n = min(len(survival), cost.verify_s[-1][0] - 1 - width)
    emitted = [float(width + 1)]
    for p in survival[:max(n, 0)]:
        emitted.append(emitted[-1] + p)
    best_k, best_rate = 0, emitted[0] / cost.pass_cost(0, width)
    sizes = {s - 1 - width for s, _ in cost.verify_s if 1 <= s - 1 - width <= n}
    for k in sorted(sizes | ({n} if n > 0 else set())):
        rate = emitted[k] / cost.pass_cost(k, width)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k


class CostTrack:
    """The curve as passes cost now (``cost``): its shape drifts within a day
    (docs/benchmarks/speculative.md, "The curve's shape drifts"). The single step is scaled by
    the median measured / predicted of the last ``cost_check_passes`` lone steps; each batch
    size also by its shape, the median of its own passes' ratio over the steps', once
    ``calibration_repeats`` of them were timed (the nearest timed size's before that), so a
    spell that slows every pass alike moves the steps alone. ``on_mismatch(ratio)`` is called
    once when the steps' or the batches' median is off by more than ``cost_check_factor`` (a
    curve taken on a busy machine: measured again at the next load)."""

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


class CopyOdds:
    """P(a copy goes on) after ``agree`` tokens of agreement (counted up to ``agree_cap``): this
    reply's count at agreements of that order (a power of two), on top of ``prior_weight``
    pseudo-counts at Laplace's rule of succession, ``(agree + 1) / (agree + 2)``; times how often
    copies went on past the two tokens before (``(went on + 1) / (copies + 1)``: edits recur at
    the same places). Past the cap only the reply's own count says more (uncapped, the prior
    called a passage an answer quotes in part a sure copy, drafted 15 tokens at a time). A copy
    the n-gram lookup found (not ``near`` a break) was chosen because its last tokens agree, so
    below the cap one of them is not counted, ``agree / (agree + 2)``: such copies went on at
    0.48-0.76 after 2-5 tokens where the rule says 0.75-0.86 (docs/benchmarks/speculative.md,
    "The curve's shape drifts within a day")."""

    def __init__(self, tuning: Tuning = TUNING) -> None:
        self.weight, self.cap = tuning.prior_weight, tuning.agree_cap
        self.reset()

    def reset(self) -> None:
        self._by_agree: dict[int, list[int]] = {}  # agree.bit_length() -> [went on, predictions]
        self._after: dict[tuple[int, int], list[int]] = {}  # two tokens -> [went on past them, copies]

    def observe(self, agree: int, hit: bool, after: tuple[int, int] | None = None) -> None:
        """Score one prediction; ``after``: the two tokens before it, where a copy was going on."""
        agree = min(agree, self.cap)
        for counts in (self._by_agree.setdefault(agree.bit_length(), [0, 0]),
                       self._after.setdefault(after, [0, 0]) if after is not None else [0, 0]):
            counts[0] += hit
            counts[1] += 1

    def p(self, agree: int, near: bool = True) -> float:
        agree = min(agree, self.cap)
        hits, n = self._by_agree.get(agree.bit_length(), (0, 0))
        prior = (agree + 1) / (agree + 2) if near or agree >= self.cap else agree / (agree + 2)
        return (hits + self.weight * prior) / (n + self.weight)

    def q(self, after: tuple[int, int]) -> float:
        hits, n = self._after.get(after, (0, 0))
        return (hits + 1) / (n + 1)

    def survival(self, agree: int, trust: Sequence[float], after: Sequence[tuple[int, int]],
                 near: bool = True) -> tuple[float, ...]:
        """P(the first j tokens of a copy from ``agree`` on are accepted), j = 1..len(trust);
        ``trust[i]``: that of a learned edit the copy makes at token i (1 elsewhere), ``after[i]``:
        the two tokens before token i; ``near``: the copy resumed where one broke off."""
        out, s = [], 1.0
        for i, t in enumerate(trust):
            s *= self.p(agree + i, near) * self.q(after[i]) * t
            out.append(s)
        return tuple(out)
