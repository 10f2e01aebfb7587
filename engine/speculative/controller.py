"""Adaptive draft length: pick k to maximise expected tokens per second of a verification pass.

Model. With per-token acceptance probability ``alpha`` (drafts accepted i.i.d. until the first
rejection), a pass over k drafts emits ``E_k + 1`` tokens where
``E_k = sum_{i=1..k} alpha^i`` (the accepted drafts, plus the correction or bonus token).
It costs ``verify(k + 1) + k * draft_s_per_token`` seconds. Plain decoding (k = 0) emits one
token per ``verify(1)``. On a 2-core CPU ``verify(n)`` grows almost linearly in n, so
speculation pays only at very high alpha with a free drafter; on a GPU ``verify(n)`` is nearly
flat and long drafts pay even at moderate alpha.

Acceptance is estimated from (n_proposed, n_accepted) pairs as Bernoulli trials: each accepted
draft is a success and the first rejection a failure; drafts after the first rejection were
never judged and are not counted. (accepted/proposed would underestimate alpha badly: at
alpha = 0.5 and k = 8 it gives ~0.12.)
"""
from __future__ import annotations

import json
import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "AcceptanceTracker",
    "Controller",
    "CostModel",
    "best_draft_length",
    "best_length_by_survival",
    "calibrate",
    "expected_accepted",
]

log = logging.getLogger(__name__)

_JSON_VERSION = 1
_MAX_POINTS = 64  # calibration points accepted from a cache file
_MAX_BATCH = 1 << 16


@dataclass(frozen=True)
class CostModel:
    """Measured seconds of one target decode of n tokens, plus what drafting costs: per draft
    token, and per pass (a draft model takes in the target's correction before it drafts again,
    one more step of its own on every pass).

    ``verify_s`` holds ``(n_tokens, seconds)`` points with distinct ``n_tokens >= 1`` including
    1; it is stored sorted. Between points the cost is interpolated linearly; beyond the last
    point it is extrapolated with the last segment's slope (never negative). A single point
    extrapolates proportionally (``n * t1``), the pessimistic CPU assumption.
    """

    verify_s: tuple[tuple[int, float], ...]
    draft_s_per_token: float = 0.0
    draft_s_per_pass: float = 0.0

    def __post_init__(self) -> None:
        points = tuple(sorted((int(n), float(s)) for n, s in self.verify_s))
        if not points:
            raise ValueError("CostModel needs at least the (1, seconds) calibration point")
        sizes = [n for n, _ in points]
        if sizes[0] != 1 or len(set(sizes)) != len(sizes) or sizes[-1] > _MAX_BATCH:
            raise ValueError(f"calibration sizes must be distinct, include 1, stay <= {_MAX_BATCH}: {sizes}")
        if not all(math.isfinite(s) and s > 0.0 for _, s in points):
            raise ValueError("calibration times must be positive and finite")
        for name in ("draft_s_per_token", "draft_s_per_pass"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be >= 0, got {value}")
            object.__setattr__(self, name, float(value))
        object.__setattr__(self, "verify_s", points)

    def verify_cost(self, n_tokens: int) -> float:
        """Seconds to decode ``n_tokens`` (>= 1) target tokens in one batch."""
        if n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        pts = self.verify_s
        if len(pts) == 1:
            return pts[0][1] * n_tokens
        for (n0, s0), (n1, s1) in zip(pts, pts[1:]):
            if n_tokens <= n1:
                return s0 + (s1 - s0) * (n_tokens - n0) / (n1 - n0)
        (n0, s0), (n1, s1) = pts[-2], pts[-1]
        return s1 + max(0.0, (s1 - s0) / (n1 - n0)) * (n_tokens - n1)

    def with_draft_cost(self, draft_s_per_token: float, draft_s_per_pass: float = 0.0) -> CostModel:
        """The same verify curve with another drafter's costs."""
        return CostModel(self.verify_s, draft_s_per_token, draft_s_per_pass)

    def pass_cost(self, k: int) -> float:
        """Seconds of one pass that verifies k drafted tokens (k = 0: a plain step)."""
        if k == 0:
            return self.verify_cost(1)
        return self.verify_cost(k + 1) + k * self.draft_s_per_token + self.draft_s_per_pass

    def to_json(self) -> str:
        return json.dumps({
            "version": _JSON_VERSION,
            "verify_s": [[n, s] for n, s in self.verify_s],
            "draft_s_per_token": self.draft_s_per_token,
        })

    @classmethod
    def from_json(cls, text: str) -> CostModel:
        """Parse ``to_json`` output; ValueError on anything malformed (the caller recalibrates)."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"cost model cache is not usable JSON: {exc}"[:200]) from None
        if not isinstance(data, dict) or data.get("version") != _JSON_VERSION:
            raise ValueError("cost model cache has an unknown format or version")
        raw = data.get("verify_s")
        draft = data.get("draft_s_per_token", 0.0)
        if not isinstance(raw, list) or not 1 <= len(raw) <= _MAX_POINTS:
            raise ValueError("cost model cache has a bad list of calibration points")
        points = []
        for item in raw:
            if (not isinstance(item, list) or len(item) != 2 or type(item[0]) is not int
                    or not isinstance(item[1], (int, float)) or isinstance(item[1], bool)):
                raise ValueError(f"cost model cache has a bad calibration point: {item!r}")
            points.append((item[0], float(item[1])))
        if not isinstance(draft, (int, float)) or isinstance(draft, bool):
            raise ValueError("cost model cache has a bad draft cost")
        return cls(tuple(points), float(draft))


def calibrate(
    measure: Callable[[int], float], sizes: Sequence[int] = (1, 2, 4, 8, 16), repeats: int = 3
) -> CostModel:
    """Build a CostModel from ``measure(n)`` (seconds for one target decode of n tokens).

    Each size is measured ``repeats`` times and the median kept, so one hiccup (a page fault,
    another process) does not skew the curve; the sizes take turns, so a machine whose speed
    drifts during the calibration shifts the whole curve rather than bending it. ``sizes`` must
    include 1.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if 1 not in sizes:
        raise ValueError("calibration sizes must include 1")
    order = sorted(set(int(s) for s in sizes))
    times: dict[int, list[float]] = {n: [] for n in order}
    for _ in range(repeats):
        for n in order:
            times[n].append(float(measure(n)))
    points = [(n, statistics.median(times[n])) for n in order]
    log.debug("calibrated verify cost: %s", points)
    return CostModel(tuple(points))


def expected_accepted(alpha: float, k: int) -> float:
    """E[# accepted] of k drafts with i.i.d. acceptance alpha: sum_{i=1..k} alpha^i."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if alpha == 1.0:
        return float(k)
    return alpha * (1.0 - alpha**k) / (1.0 - alpha)


def tokens_per_second(cost: CostModel, alpha: float, k: int) -> float:
    """Expected emitted tokens per second with drafts of length k (k = 0: plain decoding)."""
    return (expected_accepted(alpha, k) + 1.0) / cost.pass_cost(k)


def best_draft_length(
    cost: CostModel, alpha: float, k_max: int, *, margin: float = 0.03
) -> int:
    """The k in 0..k_max with the highest expected tokens per second.

    Speculation is chosen only when it beats plain decoding by at least ``margin`` (3%), so
    noise in alpha or in the calibration never makes decoding slower. Returns 0 for plain.
    """
    if k_max <= 0:
        return 0
    plain = tokens_per_second(cost, alpha, 0)
    best_k, best_rate = 0, plain
    for k in range(1, k_max + 1):
        rate = tokens_per_second(cost, alpha, k)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k if best_rate >= plain * (1.0 + margin) else 0


def best_length_by_survival(cost: CostModel, survival: Sequence[float], *, margin: float = 0.03) -> int:
    """The draft length with the highest expected tokens per second, given ``survival[j-1]`` =
    P(the first j drafted tokens are all accepted). 0 (plain decoding) unless that beats plain
    by ``margin``.

    Only calibrated batch sizes are considered (plus the whole draft, when it is shorter than
    the largest): on a CPU the cost per token of a batch is far from smooth (a 16-token batch
    can cost less than an 8-token one), and the calibrated sizes are where it is known.
    """
    n = min(len(survival), cost.verify_s[-1][0] - 1)  # never a batch past the calibrated ones
    if n < 1:
        return 0
    candidates = {s - 1 for s, _ in cost.verify_s if 1 <= s - 1 <= n} | {n}
    plain = 1.0 / cost.verify_cost(1)
    best_k, best_rate = 0, plain
    expected = [0.0]
    for p in survival:
        expected.append(expected[-1] + p)
    for k in sorted(candidates):
        rate = (1.0 + expected[k]) / cost.pass_cost(k)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k if best_rate >= plain * (1.0 + margin) else 0


class AcceptanceTracker:
    """Online estimate of the per-token acceptance probability alpha of one drafter.

    Success and failure counts decay by ``decay`` per update (an EMA over verification passes,
    effective memory ~1/(1-decay) passes); ``prior_weight`` pseudo-trials at ``prior`` keep the
    estimate sane before evidence arrives:
    ``alpha = (successes + prior * prior_weight) / (successes + failures + prior_weight)``.
    """

    def __init__(self, prior: float = 0.6, prior_weight: float = 2.0, decay: float = 0.9) -> None:
        if not 0.0 <= prior <= 1.0 or prior_weight <= 0.0 or not 0.0 < decay < 1.0:
            raise ValueError("need prior in [0, 1], prior_weight > 0 and decay in (0, 1)")
        self._prior = prior
        self._prior_weight = prior_weight
        self._decay = decay
        self._successes = 0.0
        self._failures = 0.0

    def update(self, n_proposed: int, n_accepted: int) -> None:
        """Record one verification of ``n_proposed`` drafts of which the first ``n_accepted`` held."""
        if not 0 <= n_accepted <= n_proposed:
            raise ValueError(f"need 0 <= n_accepted <= n_proposed, got {n_accepted}, {n_proposed}")
        if n_proposed == 0:
            return
        self._successes = self._decay * self._successes + n_accepted
        self._failures = self._decay * self._failures + (1 if n_accepted < n_proposed else 0)

    @property
    def alpha(self) -> float:
        s, f, w = self._successes, self._failures, self._prior_weight
        return (s + self._prior * w) / (s + f + w)

    def reset(self) -> None:
        self._successes = self._failures = 0.0


class Controller:
    """Chooses each pass's draft length for one drafter from its cost model and acceptance.

    Exploration: the acceptance estimate only moves when drafts are verified, so after choosing
    0 on ``probe_after`` consecutive passes (passes with nothing to draft do not count) the
    controller allows one probe of ``probe_len`` tokens. A fully accepted probe is followed by
    another probe on the next pass, so a drafter whose acceptance has recovered (a copied
    passage began) climbs back within a few passes instead of one probe per ``probe_after``
    steps. A failed probe costs about one extra step on the CPU curve (verify(3) ~ 2.1 x
    verify(1), for at least one token) once per ``probe_after`` steps: ~3% at most.
    """

    def __init__(
        self,
        cost: CostModel,
        tracker: AcceptanceTracker | None = None,
        *,
        probe_after: int = 32,
        probe_len: int = 2,
        margin: float = 0.03,
    ) -> None:
        if probe_after < 1 or probe_len < 1:
            raise ValueError("probe_after and probe_len must be >= 1")
        self.cost = cost
        self.tracker = tracker if tracker is not None else AcceptanceTracker()
        self.probe_after = probe_after
        self.probe_len = probe_len
        self.margin = margin
        self._plain_streak = 0  # consecutive passes where drafts were available but 0 was chosen
        self.last_was_probe = False

    def choose(self, k_max: int) -> int:
        """Draft length for the next pass, at most ``k_max``; 0 = plain decode."""
        self.last_was_probe = False
        if k_max <= 0:
            return 0
        k = best_draft_length(self.cost, self.tracker.alpha, k_max, margin=self.margin)
        if k > 0:
            self._plain_streak = 0
            return k
        self._plain_streak += 1
        if self._plain_streak > self.probe_after:
            self._plain_streak = 0
            self.last_was_probe = True
            log.debug("probing the drafter (alpha %.2f)", self.tracker.alpha)
            return min(self.probe_len, k_max)
        return 0

    def update(self, n_proposed: int, n_accepted: int) -> None:
        """Feed the outcome of a verified draft to the acceptance tracker."""
        self.tracker.update(n_proposed, n_accepted)
        if self.last_was_probe and n_proposed > 0 and n_accepted == n_proposed:
            self._plain_streak = self.probe_after  # it held: probe again on the next plain pass

    @property
    def alpha(self) -> float:
        return self.tracker.alpha
