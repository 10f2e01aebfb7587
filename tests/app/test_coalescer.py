"""The token coalescer's latency with a fake clock: a speculative burst is handed out when its
target pass ends, not one pass later; fast single-token steps are still batched."""

from __future__ import annotations

from app.engine_link.throttle import Coalescer

INTERVAL = 1 / 30


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def run(steps: list[tuple[float, int]], *, boundaries: bool = True) -> list[tuple[float, float]]:
    """Feed ``(step seconds, tokens)`` steps as the worker does (a step's tokens arrive together
    when its pass ends); return (made at, handed out at) for every token."""
    clock = Clock()
    c: Coalescer[float] = Coalescer(INTERVAL, clock)
    out: list[tuple[float, float]] = []
    for seconds, n in steps:
        clock.t += seconds
        for i in range(n):
            batch = c.add(clock.t, boundary=boundaries and i == n - 1)
            out += [(made, clock.t) for made in batch or ()]
    out += [(made, clock.t) for made in c.flush() or ()]
    return out


def test_a_speculative_burst_is_shown_when_its_pass_ends() -> None:
    # 0.5 s target passes, each verifying a draft: 1 + 5 tokens, then 4, then 6
    got = run([(0.5, 6), (0.6, 4), (0.4, 6)])
    assert len(got) == 16
    assert all(made == shown for made, shown in got), got


def test_without_step_boundaries_the_burst_waits_a_whole_pass() -> None:
    # the old behaviour, kept for a stream without boundaries: it shows what the fix fixes
    got = run([(0.5, 6), (0.6, 4)], boundaries=False)
    assert max(shown - made for made, shown in got) >= 0.6 - 1e-9


def test_fast_single_token_steps_are_still_batched() -> None:
    got = run([(0.005, 1)] * 200)  # 200 tok/s for 1 s
    shown_at = sorted({shown for _, shown in got})
    assert len(shown_at) <= 1.0 / INTERVAL + 2  # about one batch per interval, not 200
    assert max(shown - made for made, shown in got) <= INTERVAL + 0.005 + 1e-9


def test_slow_single_token_steps_are_never_held() -> None:
    got = run([(0.2, 1)] * 10)
    assert all(made == shown for made, shown in got)


def test_a_boundary_flushes_only_after_a_slow_step() -> None:
    clock = Clock()
    c: Coalescer[str] = Coalescer(INTERVAL, clock)
    assert c.add("a") == ["a"]  # first item after a quiet period: at once
    clock.t = 0.010
    assert c.add("b", boundary=True) == ["b"]  # the step took long (no step before it)
    clock.t = 0.020
    assert c.add("c", boundary=True) is None  # a 10 ms step: the next comes soon
    clock.t = 0.060
    assert c.add("d") == ["c", "d"]  # due again
    assert c.flush() is None
