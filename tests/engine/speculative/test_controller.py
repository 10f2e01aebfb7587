"""Tests of engine.speculative.controller: cost interpolation, the draft-length optimum on measured CPU
and GPU-like curves, the acceptance tracker, the probe rule, calibration and the JSON cache."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.speculative.controller import (
    AcceptanceTracker,
    Controller,
    CostModel,
    best_draft_length,
    calibrate,
    expected_accepted,
)

# 1.5B target on the 2-core CPU: batch of n tokens -> seconds.
CPU = CostModel(((1, 0.032), (4, 0.085), (8, 0.174), (16, 0.215), (32, 0.364)))
# A GPU: every batch costs about one step.
GPU = CostModel(((1, 0.020), (2, 0.0202), (4, 0.0205), (8, 0.021), (16, 0.022), (32, 0.025)))
DRAFT_MODEL_S = 0.65 * 0.032  # 0.5B draft, ~20 ms per token


# ------------------------------------------------------------- cost model

def test_interpolation_and_extrapolation() -> None:
    assert CPU.verify_cost(1) == pytest.approx(0.032)
    assert CPU.verify_cost(2) == pytest.approx(0.032 + 0.053 / 3)
    assert CPU.verify_cost(6) == pytest.approx((0.085 + 0.174) / 2)
    assert CPU.verify_cost(16) == pytest.approx(0.215)
    assert CPU.verify_cost(48) == pytest.approx(0.364 + 16 * (0.364 - 0.215) / 16)
    single = CostModel(((1, 0.03),))
    assert single.verify_cost(5) == pytest.approx(0.15)
    falling = CostModel(((1, 0.02), (8, 0.03), (16, 0.029)))  # noisy tail: never extrapolate downwards
    assert falling.verify_cost(100) == pytest.approx(0.029)


def test_points_are_sorted_and_validated() -> None:
    m = CostModel(((4, 0.08), (1, 0.03)), draft_s_per_token=0.01)
    assert m.verify_s == ((1, 0.03), (4, 0.08))
    for bad in [(), ((2, 0.1),), ((1, 0.1), (1, 0.2)), ((1, 0.0),), ((1, float("nan")),)]:
        with pytest.raises(ValueError):
            CostModel(bad)
    with pytest.raises(ValueError):
        CostModel(((1, 0.1),), draft_s_per_token=-1.0)
    with pytest.raises(ValueError):
        CPU.verify_cost(0)


def test_json_round_trip_and_rejects_garbage() -> None:
    m = CPU.with_draft_cost(0.0208)
    back = CostModel.from_json(m.to_json())
    assert back == m
    bad_docs = [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"version": 99, "verify_s": [[1, 0.1]]}),
        json.dumps({"version": 1, "verify_s": [[1, 0.1]] * 1000}),
        json.dumps({"version": 1, "verify_s": [["1", 0.1]]}),
        json.dumps({"version": 1, "verify_s": [[1, 0.1, 3]]}),
        json.dumps({"version": 1, "verify_s": [[1, -0.1]]}),
        json.dumps({"version": 1, "verify_s": [[1, 0.1]], "draft_s_per_token": "x"}),
        json.dumps({"version": 1, "verify_s": [[1, 0.1], [10**9, 1.0]]}),
    ]
    for doc in bad_docs:
        with pytest.raises(ValueError):
            CostModel.from_json(doc)


def test_calibrate_takes_medians() -> None:
    calls: list[int] = []
    spikes = iter([0.5, 0.0, 0.5] + [0.0] * 10)  # hiccups at the first call and the third

    def measure(n: int) -> float:
        calls.append(n)
        return 0.03 + 0.01 * (n - 1) + next(spikes)

    m = calibrate(measure, sizes=(4, 1, 2), repeats=3)
    assert calls == [1, 2, 4] * 3  # the sizes take turns: a drifting machine shifts them alike
    assert m.verify_s == ((1, pytest.approx(0.03)), (2, pytest.approx(0.04)), (4, pytest.approx(0.06)))
    with pytest.raises(ValueError):
        calibrate(measure, sizes=(2, 4))


# ------------------------------------------------------------- choosing k

def test_expected_accepted() -> None:
    assert expected_accepted(0.5, 0) == 0.0
    assert expected_accepted(0.5, 3) == pytest.approx(0.5 + 0.25 + 0.125)
    assert expected_accepted(1.0, 7) == 7.0
    assert expected_accepted(0.0, 7) == 0.0
    with pytest.raises(ValueError):
        expected_accepted(1.2, 3)


def test_cpu_curve_speculation_does_not_pay_at_moderate_alpha() -> None:
    assert best_draft_length(CPU, 0.5, 32) == 0


def test_cpu_curve_ngram_at_high_alpha_drafts() -> None:
    k = best_draft_length(CPU, 0.95, 32)
    assert k >= 8
    assert best_draft_length(CPU, 0.95, 3) == 3  # k_max caps k
    assert best_draft_length(CPU, 0.95, 0) == 0


def test_gpu_curve_drafts_long_even_at_moderate_alpha() -> None:
    assert best_draft_length(GPU, 0.6, 32) >= 5
    assert best_draft_length(GPU, 0.9, 32) >= 16


def test_cpu_draft_model_never_pays_up_to_alpha_080() -> None:
    costly = CPU.with_draft_cost(DRAFT_MODEL_S)
    for alpha in np.linspace(0.0, 0.8, 17):
        assert best_draft_length(costly, float(alpha), 16) == 0


def test_margin_rejects_marginal_gains() -> None:
    # k=1 gains exactly 2% over plain: under the 3% margin it is refused, with 1% it is taken.
    m = CostModel(((1, 1.0), (2, 1.5 / 1.02)))
    assert best_draft_length(m, 0.5, 1) == 0
    assert best_draft_length(m, 0.5, 1, margin=0.01) == 1


# ------------------------------------------------------------- acceptance tracker

def test_tracker_counts_only_judged_tokens() -> None:
    t = AcceptanceTracker(prior=0.5, prior_weight=1e-9, decay=0.999999)
    for _ in range(10):
        t.update(8, 1)  # one success, then one failure; 6 drafts never judged
    assert t.alpha == pytest.approx(0.5, abs=1e-3)


@pytest.mark.parametrize("alpha", [0.3, 0.7, 0.95])
def test_tracker_converges_to_true_alpha(alpha: float) -> None:
    rng = np.random.default_rng(int(alpha * 100))
    t = AcceptanceTracker(decay=0.98)
    readings = []
    for step in range(3000):
        k = int(rng.integers(1, 9))
        n = next((i for i in range(k) if rng.random() >= alpha), k)
        t.update(k, n)
        if step > 500:
            readings.append(t.alpha)
    assert np.mean(readings) == pytest.approx(alpha, abs=0.04)


def test_tracker_prior_and_extremes() -> None:
    t = AcceptanceTracker(prior=0.6)
    assert t.alpha == pytest.approx(0.6)
    for _ in range(100):
        t.update(4, 4)
    assert t.alpha > 0.95
    for _ in range(100):
        t.update(4, 0)
    assert t.alpha < 0.15  # the prior keeps a floor of prior_weight * prior / (10 + prior_weight)
    t.update(0, 0)  # nothing proposed: no evidence
    with pytest.raises(ValueError):
        t.update(2, 3)


# ------------------------------------------------------------- controller

def test_controller_follows_acceptance() -> None:
    c = Controller(CPU)
    for _ in range(50):
        c.update(8, 8)
    assert c.choose(32) >= 8
    assert c.choose(2) == 2
    assert c.choose(0) == 0
    for _ in range(50):
        c.update(4, 0)
    assert c.choose(32) == 0


def test_probe_after_long_plain_streak() -> None:
    c = Controller(CPU, probe_after=32, probe_len=2)
    for _ in range(50):
        c.update(4, 0)
    choices = [c.choose(16) for _ in range(32)]
    assert choices == [0] * 32
    assert c.choose(0) == 0  # nothing to draft: does not count, no probe wasted
    assert c.choose(16) == 2 and c.last_was_probe
    c.update(2, 0)  # the probe failed: back to a long plain streak
    assert [c.choose(16) for _ in range(32)] == [0] * 32
    assert c.choose(1) == 1  # probe capped by the available draft


def test_successful_probes_recover_quickly() -> None:
    c = Controller(CPU, probe_after=32)
    for _ in range(50):
        c.update(4, 0)
    passes = 0
    while True:
        k = c.choose(16)
        passes += 1
        if k and not c.last_was_probe:
            break
        if k:
            c.update(k, k)  # the drafter is right again
        assert passes < 60
    assert passes < 45  # one probe interval plus a short run of back-to-back probes
