"""The fleet's rules, on stand-ins for loaded models (the real ones: tests/engine/server/
test_fleet_server.py): the budget and the count are never exceeded, a leased model is never
unloaded, the least recently used idle one goes first, idle models expire, one load serves
every request that waits for it, and a failed load names its file."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.errors import ModelLoadError
from engine.models.served import Offer
from engine.runtime.fleet import Fleet, FleetError, LoadFailed, UnknownModel
from tests.conftest import REPLY_WAIT_S


class Stand:
    """What ``load`` makes: remembers being closed."""

    def __init__(self, name: str) -> None:
        self.name, self.closed = name, False

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Waiters(threading.Condition):
    """The fleet's condition, counting the threads blocked in it: a test sees that a request
    waits (by state, not by how long it has been running)."""

    def __init__(self) -> None:
        super().__init__(threading.RLock())  # (reentrant, as the fleet's own)
        self.blocked = self.ended = 0
        self._seen = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        with self._seen:
            self.blocked += 1
            self._seen.notify_all()
        try:
            return super().wait(timeout)  # (the fleet's lock is released only in here)
        finally:
            with self._seen:
                self.blocked -= 1
                self._seen.notify_all()

    def start(self, fn: Callable[[], object]) -> threading.Thread:
        """Run ``fn`` in a thread of its own, counted in ``ended`` once it returns."""
        def run() -> None:
            try:
                fn()
            finally:
                with self._seen:
                    self.ended += 1
                    self._seen.notify_all()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def note(self) -> None:
        """Have ``until_blocked`` look again (something its ``wrong`` depends on changed)."""
        with self._seen:
            self._seen.notify_all()

    def until_blocked(self, n: int, wrong: Callable[[], bool] = lambda: False) -> None:
        """Return once ``n`` threads are blocked in the fleet, none of those started having
        ended and ``wrong()`` false (either fails the test at once; the bound is a safety net)."""
        with self._seen:
            assert self._seen.wait_for(lambda: self.blocked == n or self.ended or wrong(), REPLY_WAIT_S)
            assert (self.blocked, self.ended, wrong()) == (n, 0, False)


def watched(f: Fleet[Stand]) -> Waiters:
    """Put a Waiters in place of ``f``'s condition (before any thread uses it)."""
    f._changed = waiters = Waiters()
    return waiters


def offers(**sizes: int) -> list[Offer]:
    return [Offer(name, Path(f"/models/{name}.gguf"), frozenset({f"{name}.gguf"}), None, size, 512)
            for name, size in sizes.items()]


def fleet(budget: int = 10, max_loaded: int = 4, ttl_s: float = 60.0, fail: set[str] = frozenset(),
          **sizes: int) -> tuple[Fleet[Stand], list[str], Clock]:
    loads: list[str] = []
    clock = Clock()

    def load(offer: Offer) -> Stand:
        loads.append(offer.name)
        if offer.name in fail:
            raise ModelLoadError("the file is truncated")
        return Stand(offer.name)

    return Fleet(offers(**sizes), load, budget=budget, max_loaded=max_loaded, ttl_s=ttl_s,
                 clock=clock, reaper=False), loads, clock


def use(f: Fleet[Stand], name: str) -> Stand:
    lease = f.acquire(name)
    lease.release()
    return lease.value


def test_models_load_once_by_name_or_alias_and_stay_loaded():
    f, loads, _ = fleet(a=3, b=3)
    first = use(f, "a")
    assert use(f, "a.gguf") is first and loads == ["a"]
    assert f.status(f.find("a")) == "loaded" and f.status(f.find("b")) == "unloaded"
    with pytest.raises(UnknownModel, match="'c' does not exist.*'a', 'b'"):
        f.acquire("c")


def test_the_budget_is_never_exceeded_and_the_least_recently_used_goes_first():
    f, loads, clock = fleet(budget=10, a=4, b=4, c=4, d=6)
    a = use(f, "a")
    clock.now = 1
    b = use(f, "b")
    clock.now = 2
    use(f, "a")  # a is now more recent than b
    clock.now = 3
    use(f, "c")  # 12 > 10: b goes
    assert b.closed and not a.closed and [lo.offer.name for lo in f.loaded()] == ["c", "a"]
    for name in ["d", "a", "b", "d", "c", "a", "d"]:
        use(f, name)
        assert f.used <= f.budget
    assert loads == ["a", "b", "c", "d", "a", "b", "d", "c", "a", "d"]


def test_the_count_is_a_limit_too():
    f, _, _ = fleet(budget=100, max_loaded=2, a=1, b=1, c=1)
    for name in "abcab":
        use(f, name)
        assert len(f.loaded()) <= 2


def test_a_leased_model_is_never_unloaded_and_a_load_waits_for_a_lease_to_end():
    f, _, _ = fleet(budget=8, a=5, b=5)
    held = f.acquire("a")
    with pytest.raises(FleetError, match="stay busy"):
        f.acquire("b", timeout=0)
    assert not held.value.closed
    waiters = watched(f)
    got: list[Stand] = []
    waiter = waiters.start(lambda: got.append(use(f, "b")))
    waiters.until_blocked(1)  # the load waits for the lease (not released before it asked)
    assert got == [] and not held.value.closed
    held.release()  # the waiting load unloads a, then loads b
    waiter.join(REPLY_WAIT_S)
    assert held.value.closed and [s.name for s in got] == ["b"]


def test_idle_models_expire_after_their_time_to_live_and_keep_alive_changes_it():
    f, _, clock = fleet(ttl_s=60, a=1, b=1, c=1, d=1)
    a, b = use(f, "a"), use(f, "b")
    forever = f.acquire("d")
    forever.keep_alive(-1)  # keep_alive -1: never
    forever.release()
    lease = f.acquire("c")
    lease.keep_alive(0)  # keep_alive 0: unload once the reply is done
    clock.now = 59
    assert f.expire() == [] and not a.closed
    clock.now = 61
    assert sorted(f.expire()) == ["a", "b"] and a.closed and b.closed
    assert not lease.value.closed  # leased: never
    lease.release()
    assert f.expire() == ["c"] and lease.value.closed
    clock.now = 10_000
    assert f.expire() == [] and f.status(f.find("d")) == "loaded"


def test_every_request_waiting_for_a_load_gets_the_one_load():
    started, go = threading.Event(), threading.Event()
    made: list[str] = []

    def load(offer: Offer) -> Stand:
        made.append(offer.name)
        waiters.note()
        started.set()
        go.wait(REPLY_WAIT_S)
        return Stand(offer.name)

    f: Fleet[Stand] = Fleet(offers(a=1), load, budget=10, reaper=False)
    waiters = watched(f)
    got: list[Stand] = []
    threads = [waiters.start(lambda: got.append(use(f, "a"))) for _ in range(4)]
    assert started.wait(REPLY_WAIT_S)
    waiters.until_blocked(3, lambda: len(made) > 1)  # the three others wait for that one load
    assert f.status(f.find("a")) == "loading" and got == []
    go.set()
    for t in threads:
        t.join(REPLY_WAIT_S)
    assert made == ["a"] and len(got) == 4 and len({id(s) for s in got}) == 1


def test_a_failed_load_names_its_file_and_leaves_the_others_serving():
    f, _, _ = fleet(fail={"b"}, a=1, b=1)
    a = use(f, "a")
    with pytest.raises(LoadFailed, match=r"'b' \(/models/b.gguf\): the file is truncated"):
        f.acquire("b")
    assert f.failure(f.find("b")) == "the file is truncated" and f.used == 1
    assert use(f, "a") is a


def test_a_model_larger_than_the_budget_is_refused_before_anything_unloads():
    f, loads, _ = fleet(budget=10, a=4, big=11)
    a = use(f, "a")
    with pytest.raises(FleetError, match="needs about"):
        f.acquire("big")
    assert not a.closed and loads == ["a"]


def test_unload_waits_for_the_reply_in_flight_and_an_adopted_model_stays():
    f, _, _ = fleet(a=1, own=1)
    lease = f.acquire("a")
    waiters = watched(f)
    done = threading.Event()
    waiters.start(lambda: (f.unload("a"), done.set()))
    waiters.until_blocked(1)  # the unload waits for the lease
    assert not done.is_set() and not lease.value.closed
    lease.release()
    assert done.wait(REPLY_WAIT_S) and lease.value.closed
    assert f.unload("a") is False
    own = Stand("own")
    f.adopt(f.find("own"), own)
    with pytest.raises(FleetError, match="window's own"):
        f.unload("own")
    f.close()
    assert not own.closed
