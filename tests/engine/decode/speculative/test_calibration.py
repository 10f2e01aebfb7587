"""Tests of the verify-cost calibration (engine.decode.speculative.calibration.measure_cost), on a real model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.decode.speculative import calibration
from engine.decode.speculative.calibration import measure_cost
from engine.decode.speculative.tuning import TUNING
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model

DEPTH = TUNING.calibration_depth


def timed_batches(ctx: LlamaSequence) -> list[tuple[int, int]]:
    """Spy on ``ctx.decode``: (tokens already in the context, batch size) of each all-logits call."""
    seen: list[tuple[int, int]] = []
    decode = ctx.decode

    def spy(tokens: list[int], **kw: str) -> None:
        if kw.get("logits") == "all":
            seen.append((ctx.n_past, len(tokens)))
        return decode(tokens, **kw)

    ctx.decode = spy
    return seen


def test_batches_are_timed_after_a_realistic_context_then_cleared(smol: Model) -> None:
    with LlamaSequence(smol, ContextParams(n_ctx=2048)) as ctx:
        ctx.decode([1, 2, 3])
        seen = timed_batches(ctx)
        cost = measure_cost(ctx, sizes=(1, 8))
        assert sorted(seen) == [(DEPTH, 1)] * 3 + [(DEPTH, 8)] * 3  # medians of three
        assert ctx.n_past == 0
    assert 0 < cost.verify_cost(1) < cost.verify_cost(8)


def test_a_small_context_is_calibrated_at_what_depth_it_has(smol: Model) -> None:
    with LlamaSequence(smol, ContextParams(n_ctx=256)) as ctx:
        seen = timed_batches(ctx)
        measure_cost(ctx, sizes=(1, 16))
    assert {past for past, _ in seen} == {256 - 16}


def test_a_curve_is_measured_once_then_cached_until_forgotten(smol: Model, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DUET_HOME", str(tmp_path))
    measured = []
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as ctx:
        first = calibration.cached_cost(ctx, (1, 2), lambda: measured.append(1))
        again = calibration.cached_cost(ctx, (1, 2), lambda: measured.append(2))
        assert measured == [1] and again == first  # the second came from the cache
        calibration.forget(ctx, (1, 2))
        calibration.cached_cost(ctx, (1, 2), lambda: measured.append(3))
        calibration.forget(None)
        calibration.cached_cost(ctx, (1, 2), lambda: measured.append(4))
        calibration.cached_cost(ctx, (1, 2, 3), lambda: measured.append(5))  # other sizes: measured
        cache = calibration._cache_file()
        entries = json.loads(cache.read_text())
        entries = {key: [[1, 1.0], [10**9, 2.0]] for key in entries}  # tampered
        cache.write_text(json.dumps(entries))
        assert calibration.cached_cost(ctx, (1, 2), lambda: measured.append(6)).verify_s[-1][0] == 2
        old = json.dumps({"version": 1, "verify_s": [[1, 1.0], [2, 2.0]]})  # the format before
        cache.write_text(json.dumps({key: old for key in entries}))
        calibration.cached_cost(ctx, (1, 2), lambda: measured.append(7))  # measured again
        assert all(isinstance(v, list) for v in json.loads(cache.read_text()).values())
    assert measured == [1, 3, 4, 5, 6, 7]


def test_another_llama_cpp_build_or_exactness_measures_again(smol: Model, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A curve measured on one build (its kernels) or with exact decoding off (repacked weights)
    is not another's: a verify pass costs differently there."""
    monkeypatch.setenv("DUET_HOME", str(tmp_path))
    measured = []
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1)) as ctx:
        calibration.cached_cost(ctx, (1, 2), lambda: measured.append(1))
        calibration.cached_cost(ctx, (1, 2), lambda: measured.append(2))  # cached
        monkeypatch.setattr(calibration, "build_id", lambda: "another build")
        calibration.cached_cost(ctx, (1, 2), lambda: measured.append(3))
    with LlamaSequence(smol, ContextParams(n_ctx=256, n_threads=1, exact=False)) as ctx:
        calibration.cached_cost(ctx, (1, 2), lambda: measured.append(4))
    assert measured == [1, 3, 4]


def test_a_cached_curve_is_read_as_points_and_garbage_is_refused() -> None:
    assert calibration.curve_from_points([[4, 0.08], [1, 0.03]]).verify_s == ((1, 0.03), (4, 0.08))
    assert calibration.curve_from_points([[1, 1]]).verify_cost(2) == 2.0
    for bad in [[[1, 0.1]] * 1000, [["1", 0.1]], [[1, 0.1, 3]], [[1, -0.1]], [[1, True]], "x",
                {"1": 0.1}, [[2, 0.1]], [], None]:
        with pytest.raises(ValueError):
            calibration.curve_from_points(bad)


def test_the_sizes_take_turns_and_each_point_is_a_median(smol: Model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hiccup of the machine in one round moves no point: each is the median of three, the
    sizes taking turns so that a drift shifts the curve without bending it."""
    clock = [0.0]
    spikes = iter([0.5, 0.0, 0.5] + [0.0] * 10)  # hiccups at the first timed decode and the third
    monkeypatch.setattr(calibration.time, "perf_counter", lambda: clock[0])
    with LlamaSequence(smol, ContextParams(n_ctx=2048)) as ctx:
        seen = timed_batches(ctx)
        decode = ctx.decode

        def slow(tokens: list[int], **kw: str) -> None:
            decode(tokens, **kw)
            if kw.get("logits") == "all":
                clock[0] += 0.03 + 0.01 * (len(tokens) - 1) + next(spikes)

        ctx.decode = slow
        cost = measure_cost(ctx, sizes=(4, 1, 2))
    assert [n for _, n in seen] == [1, 2, 4] * 3
    assert [s for _, s in cost.verify_s] == pytest.approx([0.03, 0.04, 0.06])
    with pytest.raises(ValueError):
        calibration.Measurement(ctx, sizes=(2, 4))
