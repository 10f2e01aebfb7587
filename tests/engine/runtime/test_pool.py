"""The pool's rules, on stand-ins for loaded models (the real ones: tests/engine/server/
test_fleet_server.py, tests/app/test_models_kept.py): the budget and the count are never
exceeded, a leased model is never unloaded, the least recently used idle one goes first, idle
models expire, one load serves every request that waits for it, a failed load names its file,
and a load keeps the other models' idle work waiting."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.errors import ModelLoadError
from engine.models.served import ModelOffer
from engine.runtime.cores import Cores
from engine.runtime.pool import BUDGET_SHARE, LoadFailed, Pool, PoolError, UnknownModel
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
    """The pool's condition, counting the threads blocked in it: a test sees that a request
    waits (by state, not by how long it has been running)."""

    def __init__(self) -> None:
        super().__init__(threading.RLock())  # (reentrant, as the pool's own)
        self.blocked = self.ended = 0
        self._seen = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        with self._seen:
            self.blocked += 1
            self._seen.notify_all()
        try:
            return super().wait(timeout)  # (the pool's lock is released only in here)
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
        """Return once ``n`` threads are blocked in the pool, none of those started having
        ended and ``wrong()`` false (either fails the test at once; the bound is a safety net)."""
        with self._seen:
            assert self._seen.wait_for(lambda: self.blocked == n or self.ended or wrong(), REPLY_WAIT_S)
            assert (self.blocked, self.ended, wrong()) == (n, 0, False)


def watched(f: Pool[Stand]) -> Waiters:
    """Put a Waiters in place of ``f``'s condition (before any thread uses it)."""
    f._changed = waiters = Waiters()
    return waiters


def offers(**sizes: int) -> list[ModelOffer]:
    return [ModelOffer(name, Path(f"/models/{name}.gguf"), frozenset({f"{name}.gguf"}), None, size, 512)
            for name, size in sizes.items()]


def pool(budget: int | None = 10, max_loaded: int = 4, ttl_s: float = 60.0, fail: set[str] = frozenset(),
          **sizes: int) -> tuple[Pool[Stand], list[str], Clock]:
    loads: list[str] = []
    clock = Clock()

    def load(offer: ModelOffer, cores: Cores) -> Stand:
        loads.append(offer.name)
        if offer.name in fail:
            raise ModelLoadError("the file is truncated")
        return Stand(offer.name)

    return Pool(offers(**sizes), load, budget=budget, max_loaded=max_loaded, ttl_s=ttl_s,
                 clock=clock, reaper=False), loads, clock


def use(f: Pool[Stand], name: str) -> Stand:
    lease = f.acquire(name)
    lease.release()
    return lease.value


def test_models_load_once_by_name_or_alias_and_stay_loaded():
    f, loads, _ = pool(a=3, b=3)
    first = use(f, "a")
    assert use(f, "a.gguf") is first and loads == ["a"]
    assert f.status(f.find("a")) == "loaded" and f.status(f.find("b")) == "unloaded"
    with pytest.raises(UnknownModel, match="'c' does not exist.*'a', 'b'"):
        f.acquire("c")


def test_the_budget_is_never_exceeded_and_the_least_recently_used_goes_first():
    f, loads, clock = pool(budget=10, a=4, b=4, c=4, d=6)
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
    f, _, _ = pool(budget=100, max_loaded=2, a=1, b=1, c=1)
    for name in "abcab":
        use(f, name)
        assert len(f.loaded()) <= 2


def test_a_leased_model_is_never_unloaded_and_a_load_waits_for_a_lease_to_end():
    f, _, _ = pool(budget=8, a=5, b=5)
    held = f.acquire("a")
    with pytest.raises(PoolError, match="stay busy"):
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
    f, _, clock = pool(ttl_s=60, a=1, b=1, c=1, d=1)
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

    def load(offer: ModelOffer, cores: Cores) -> Stand:
        made.append(offer.name)
        waiters.note()
        started.set()
        go.wait(REPLY_WAIT_S)
        return Stand(offer.name)

    f: Pool[Stand] = Pool(offers(a=1), load, budget=10, reaper=False)
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
    f, _, _ = pool(fail={"b"}, a=1, b=1)
    a = use(f, "a")
    with pytest.raises(LoadFailed, match=r"'b' \(/models/b.gguf\): the file is truncated"):
        f.acquire("b")
    assert f.failure(f.find("b")) == "the file is truncated" and f.used == 1
    assert use(f, "a") is a


def test_a_model_larger_than_the_budget_is_refused_before_anything_unloads():
    f, loads, _ = pool(budget=10, a=4, big=11)
    a = use(f, "a")
    with pytest.raises(PoolError, match="needs about"):
        f.acquire("big")
    assert not a.closed and loads == ["a"]


def test_unload_waits_for_the_reply_in_flight_and_an_adopted_model_stays():
    f, _, _ = pool(a=1, own=1)
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
    with pytest.raises(PoolError, match="window's own"):
        f.unload("own")
    f.close()
    assert not own.closed


GB = 10**9


def kept(memory: list[int], max_loaded: int = 8) -> tuple[Pool[Stand], Callable[[str, int], Stand]]:
    """The window's pool: its own offers, never expiring, the budget measured at each load
    (``memory[0]``: the bytes available now)."""
    f: Pool[Stand] = Pool(ttl_s=-1, max_loaded=max_loaded, reaper=False, memory=lambda: memory[0])

    def take(name: str, need: int) -> Stand:
        lease = f.acquire(ModelOffer(name, Path(f"/m/{name}.gguf"), bytes_needed=need),
                          load=lambda offer, cores: Stand(offer.name))
        lease.release()
        return lease.value

    return f, take


def test_the_memory_available_plus_what_the_pool_holds_is_the_measured_budget() -> None:
    free = [int(14 * GB / BUDGET_SHARE)]  # room for 14 GB

    def take_(name: str, need: int) -> Stand:
        stand = take(name, need)
        free[0] = max(0, free[0] - int(need / BUDGET_SHARE))  # (what a load takes is not free)
        return stand

    f, take = kept(free)
    a, b = take_("a", 4 * GB), take_("b", 4 * GB)
    assert take("a", 4 * GB) is a  # a is now more recent than b (a switch: nothing taken)
    c = take_("c", 6 * GB)  # 8 GB held and 6 free: it fits
    assert not (a.closed or b.closed) and f.used == 14 * GB
    take_("d", 4 * GB)  # 14 GB held, none free: b's 4 make the room
    assert b.closed and not a.closed and not c.closed
    big = take("big", 100 * GB)  # too large for all: everything goes, and it is tried anyway
    assert a.closed and c.closed and [e.value for e in f.loaded()] == [big]


def test_lowering_the_count_unloads_the_least_recently_used_idle_models() -> None:
    f, take = kept([100 * GB])
    a, b, c = take("a", 1), take("b", 1), take("c", 1)
    in_use = f.acquire("a")
    assert f.get("b") is b and f.get("z") is None
    f.max_loaded = 1
    assert f.trim() == ["b", "c"] and not a.closed and b.closed and c.closed
    in_use.release()
    assert [e.value for e in f.loaded()] == [a]


def test_a_load_is_busy_for_the_pools_cores() -> None:
    """Who decodes when is the pool's: while a model loads, the others' idle work waits."""
    seen: list[bool] = []
    f: Pool[Stand] = Pool(offers(a=1), lambda offer, cores: (seen.append(cores.calm(None)),
                                                             Stand(offer.name))[1], reaper=False)
    f.acquire("a").release()
    assert seen == [False] and f.cores.calm(None)
