"""Tests of the verify-cost calibration (engine.speculative.speculator.measure_cost), on a real model."""
from __future__ import annotations

from engine.context import Context, ContextParams
from engine.speculative.speculator import CALIBRATION_DEPTH, measure_cost


def timed_batches(ctx: Context) -> list[tuple[int, int]]:
    """Spy on ``ctx.decode``: (tokens already in the context, batch size) of each all-logits call."""
    seen: list[tuple[int, int]] = []
    decode = ctx.decode

    def spy(tokens, **kw):  # noqa: ANN001, ANN202
        if kw.get("logits") == "all":
            seen.append((ctx.n_past, len(tokens)))
        return decode(tokens, **kw)

    ctx.decode = spy
    return seen


def test_batches_are_timed_after_a_realistic_context_then_cleared(smol) -> None:  # noqa: ANN001
    with Context(smol, ContextParams(n_ctx=2048)) as ctx:
        ctx.decode([1, 2, 3])
        seen = timed_batches(ctx)
        cost = measure_cost(ctx, sizes=(1, 8), repeats=2)
        assert sorted(seen) == [(CALIBRATION_DEPTH, 1)] * 2 + [(CALIBRATION_DEPTH, 8)] * 2
        assert ctx.n_past == 0
    assert 0 < cost.verify_cost(1) < cost.verify_cost(8)


def test_a_small_context_is_calibrated_at_what_depth_it_has(smol) -> None:  # noqa: ANN001
    with Context(smol, ContextParams(n_ctx=256)) as ctx:
        seen = timed_batches(ctx)
        measure_cost(ctx, sizes=(1, 16), repeats=1)
    assert {past for past, _ in seen} == {256 - 16}
