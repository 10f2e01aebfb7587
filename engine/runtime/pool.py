"""The loaded models of a process, in one pool: the window's (the model in use and those kept
for going back to), the server's (loaded on their first request by name) and the command
line's. Nothing here imports llama.cpp: what a loaded model is (an engine thread and its
runtime) is the caller's; ``load(offer, cores)`` makes it, its ``close()`` frees it.

Each model is an ``ModelOffer``: its name and the memory it will need (estimated from its GGUF
header before it loads). The server's offers are known at start (``find`` by name or alias);
the window hands its own to ``acquire``. A user holds a ``Lease`` on its model while it uses it
(a request until its answer is sent; the window on its model in use): a leased model is never
unloaded. An idle one unloads past its time to live (``ttl_s``; < 0: never, as the window's).

One budget rule: the models loaded and loading together fit ``budget`` bytes and
``max_loaded``; to load one more, the least recently used idle models are unloaded first (their
memory is back before the new model takes its own); while leased models keep it from fitting,
the load waits for a lease to end. ``budget`` None (the default) is ``BUDGET_SHARE`` of the
memory available now plus what the pool holds, measured at each load; a model larger than a
budget given outright is refused before anything unloads, one larger than the measured share
(an estimate) is tried alone. Two requests for a model that is loading wait for the one load.

Who decodes when is the pool's ``cores`` (engine.runtime.cores): every engine it loads shares
them, and a load counts as busy there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from engine.errors import DuetError
from engine.models.hub.fit import machine
from engine.models.served import ModelOffer
from engine.runtime.cores import Cores

log = logging.getLogger(__name__)

# Defaults, as the other servers have them: llama-server's router keeps 4 models (--models-max);
# Ollama unloads after 5 minutes idle, LM Studio after 60. A desktop machine's memory is wanted
# back sooner than a server's: 30 minutes.
MAX_LOADED = 4
TTL_S = 30 * 60.0
BUDGET_SHARE = 0.8  # of the memory available (plus what the pool holds), for the models together
WAIT_S = 600.0  # how long a load waits for a leased model to be released before giving up


class Closable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T", bound=Closable)
Load = Callable[[ModelOffer, Cores], T]


class PoolError(DuetError):
    """A model the pool cannot give: an unknown name, a model larger than the budget."""


class UnknownModel(PoolError):
    pass


class LoadFailed(PoolError):
    """The model's file would not load (the message names it and says why; ``error``: what
    the load raised)."""

    def __init__(self, message: str, error: DuetError) -> None:
        super().__init__(message)
        self.error = error


class Entry(Generic[T]):
    """One loaded model: what ``load`` made, its leases, and when it may be unloaded."""

    def __init__(self, offer: ModelOffer, value: T, now: float, ttl_s: float) -> None:
        self.offer, self.value = offer, value
        self.leases = 0
        self.used = now  # the last lease's start or end
        self.ttl_s = ttl_s  # idle time before it unloads (< 0: never; 0: as its last lease ends)
        self.pinned = False  # adopted: its owner unloads it, never the pool

    @property
    def expires(self) -> float | None:
        """When it unloads if nothing leases it (None: never)."""
        return None if self.ttl_s < 0 else self.used + self.ttl_s


class Lease(Generic[T]):
    """A user's hold on a loaded model; ``release`` once (later calls do nothing)."""

    def __init__(self, pool: Pool[T], entry: Entry[T]) -> None:
        self._pool, self._entry = pool, entry
        self.value: T = entry.value
        self.offer = entry.offer
        self._released = False

    def keep_alive(self, ttl_s: float) -> None:
        """Ollama's ``keep_alive``: the model's idle time to live from now on (0: unload once
        free; < 0: never)."""
        self._pool.set_ttl(self._entry, ttl_s)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._pool.release(self._entry)


class Pool(Generic[T]):
    """The offered models by name, and the loaded ones (see the module's docstring).

    ``load``: makes a model of its offer (``acquire`` may name another); ``clock``: the time
    source for the time to live (tests pass their own and call ``expire``); ``reaper``: whether
    a thread of its own unloads expired models; ``memory``: the bytes available now (for the
    measured budget)."""

    def __init__(self, offers: Iterable[ModelOffer] = (), load: Load[T] | None = None, *,
                 budget: int | None = None, max_loaded: int = MAX_LOADED, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic, reaper: bool = True,
                 memory: Callable[[], int] | None = None) -> None:
        if max_loaded < 1:
            raise ValueError("max_loaded must be >= 1")
        self.offers = tuple(offers)
        self.budget, self.max_loaded, self.ttl_s = budget, max_loaded, ttl_s
        self.cores = Cores()
        self._load, self._clock, self._memory = load, clock, memory or memory_available
        self._loaded: dict[str, Entry[T]] = {}  # by offer name, least recently used first
        self._loading: dict[str, int] = {}  # name -> bytes reserved for a load under way
        self._failed: dict[str, str] = {}  # name -> why its last load failed
        self._changed = threading.Condition(threading.RLock())
        self._closed = False
        self._reaper: threading.Thread | None = None
        if reaper:
            self._reaper = threading.Thread(target=self._reap, name="duet-pool", daemon=True)
            self._reaper.start()

    # -- names ----------------------------------------------------------------------------
    def find(self, name: str) -> ModelOffer:
        """The offer ``name`` names: one of ``offers``, or a model loaded as another."""
        with self._changed:
            loaded = [e.offer for e in self._loaded.values()]
        for offer in (*self.offers, *loaded):
            if offer.answers_to(name):
                return offer
        raise UnknownModel(f"the model '{name}' does not exist (this server has "
                           f"{', '.join(repr(o.name) for o in self.offers)})")

    def status(self, offer: ModelOffer) -> str:
        """loaded, loading or unloaded."""
        with self._changed:
            if offer.name in self._loaded:
                return "loaded"
            return "loading" if offer.name in self._loading else "unloaded"

    def loaded(self) -> list[Entry[T]]:
        """The loaded models, most recently used first."""
        with self._changed:
            return list(reversed(self._loaded.values()))

    def get(self, name: str) -> T | None:
        """The model loaded as ``name`` (None: not loaded), without a lease."""
        with self._changed:
            entry = self._loaded.get(name)
            return entry.value if entry is not None else None

    def failure(self, offer: ModelOffer) -> str | None:
        """Why ``offer``'s last load failed (None: it did not)."""
        with self._changed:
            return self._failed.get(offer.name)

    def wait_until(self, predicate: Callable[[Pool[T]], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked whenever the pool changes)."""
        with self._changed:  # (a reentrant lock: the predicate may ask the pool)
            return self._changed.wait_for(lambda: predicate(self), timeout)

    @property
    def used(self) -> int:
        """Bytes the loaded and loading models are estimated to need."""
        with self._changed:
            return self._used()

    def room(self) -> int:
        """The budget now: the one given, or the measured share (see the module's docstring)."""
        with self._changed:
            return self._budget()

    def adopt(self, offer: ModelOffer, value: T) -> None:
        """Serve ``value``, loaded by its owner, as ``offer``: never unloaded by the pool (the
        window's models, which its local server serves)."""
        with self._changed:
            entry = self._loaded[offer.name] = Entry(offer, value, self._clock(), -1)
            entry.pinned = True
            self._changed.notify_all()

    # -- leases ---------------------------------------------------------------------------
    def acquire(self, wanted: str | ModelOffer, timeout: float = WAIT_S, *,
                load: Load[T] | None = None) -> Lease[T]:
        """A lease on the model ``wanted`` (a name of ``offers``, or an offer of the caller's),
        loaded first if it is not, by ``load`` or the pool's (blocking: minutes for a load).
        PoolError when it cannot be: unknown, larger than the budget, a failed load (naming the
        file), or every other model still leased after ``timeout`` seconds."""
        offer = wanted if isinstance(wanted, ModelOffer) else self.find(wanted)
        if self.budget is not None and offer.bytes_needed > self.budget:
            raise PoolError(f"the model '{offer.name}' needs about {_gb(offer.bytes_needed)}, "
                            f"more than the models' memory budget ({_gb(self.budget)})")
        deadline = self._clock() + timeout
        with self._changed:
            while True:
                if self._closed:
                    raise PoolError("the models are being unloaded: the process is stopping")
                entry = self._loaded.get(offer.name)
                if entry is not None:
                    return self._lease(entry)
                if offer.name in self._loading:  # another user loads it: wait for that
                    self._wait(deadline, offer)
                    continue
                victims = self._make_room(offer)
                if victims is not None:
                    break
                self._wait(deadline, offer)
            self._loading[offer.name] = offer.bytes_needed
            self._failed.pop(offer.name, None)
        try:
            for victim in victims:  # their memory is back before the new model takes its own
                _close(victim)
            make = load or self._load
            if make is None:
                raise PoolError(f"the model '{offer.name}' is not loaded")
            with self.cores.busy():  # the other models' idle work waits for the load
                value = make(offer, self.cores)
        except BaseException as e:
            with self._changed:
                del self._loading[offer.name]
                self._failed[offer.name] = str(e)
                self._changed.notify_all()
            if isinstance(e, DuetError) and not isinstance(e, PoolError):
                raise LoadFailed(f"could not load the model '{offer.name}' ({offer.path}): {e}",
                                 e) from None
            raise
        with self._changed:
            del self._loading[offer.name]
            entry = self._loaded[offer.name] = Entry(offer, value, self._clock(), self.ttl_s)
            self._changed.notify_all()
            return self._lease(entry)

    def release(self, entry: Entry[T]) -> None:
        with self._changed:
            entry.leases -= 1
            entry.used = self._clock()
            self._changed.notify_all()  # a load waiting for room; the reaper (ttl 0)

    def set_ttl(self, entry: Entry[T], ttl_s: float) -> None:
        with self._changed:
            entry.ttl_s = ttl_s
            self._changed.notify_all()

    # -- unloading ------------------------------------------------------------------------
    def unload(self, name: str) -> bool:
        """Unload the model ``name`` now, once its users are done (False: it was not
        loaded)."""
        offer = self.find(name)
        with self._changed:
            while True:
                entry = self._loaded.get(offer.name)
                if entry is None:
                    return False
                if entry.pinned:
                    raise PoolError(f"the model '{offer.name}' is the window's own: unload it "
                                    "there")
                if entry.leases == 0:
                    del self._loaded[offer.name]
                    self._changed.notify_all()
                    break
                self._changed.wait()
        _close(entry)
        return True

    def trim(self) -> list[str]:
        """Unload the least recently used idle models past ``max_loaded`` (lowered); their
        names."""
        with self._changed:
            idle = [e for e in self._loaded.values() if e.leases == 0 and not e.pinned]
            gone = idle[:max(0, len(self._loaded) - self.max_loaded)]
            for e in gone:
                del self._loaded[e.offer.name]
            if gone:
                self._changed.notify_all()
        for e in gone:
            _close(e)
        return [e.offer.name for e in gone]

    def expire(self) -> list[str]:
        """Unload every model idle past its time to live; their names."""
        now = self._clock()
        with self._changed:
            gone = [e for e in self._loaded.values() if e.leases == 0 and not e.pinned
                    and e.expires is not None and e.expires <= now]
            for e in gone:
                del self._loaded[e.offer.name]
            if gone:
                self._changed.notify_all()
        for e in gone:
            log.info("unloading %s: idle for %.0f s", e.offer.name, now - e.used)
            _close(e)
        return [e.offer.name for e in gone]

    def close(self) -> None:
        """Unload every model (their replies are cancelled by their own close)."""
        with self._changed:
            self._closed = True
            gone = [e for e in self._loaded.values() if not e.pinned]
            self._loaded = {}
            self._changed.notify_all()
        for e in gone:
            _close(e)
        if self._reaper is not None:
            self._reaper.join(5)

    # -- under the lock -------------------------------------------------------------------
    def _lease(self, entry: Entry[T]) -> Lease[T]:
        entry.leases += 1
        entry.used = self._clock()
        self._loaded.pop(entry.offer.name)  # most recently used last
        self._loaded[entry.offer.name] = entry
        return Lease(self, entry)

    def _used(self) -> int:
        return sum(e.offer.bytes_needed for e in self._loaded.values()) + \
            sum(self._loading.values())

    def _budget(self) -> int:
        if self.budget is not None:
            return self.budget
        return self._used() + int(BUDGET_SHARE * self._memory())

    def _make_room(self, offer: ModelOffer) -> list[Entry[T]] | None:
        """Take out the least recently used idle models until ``offer`` fits the budget and
        the count; those taken out (to close), or None (nothing taken) when it cannot fit while
        leased models stay."""
        victims: list[Entry[T]] = []
        idle = [e for e in self._loaded.values()  # least recently used first
                if e.leases == 0 and not e.pinned]
        budget, used = self._budget(), self._used()
        count = len(self._loaded) + len(self._loading)
        while used + offer.bytes_needed > budget or count + 1 > self.max_loaded:
            if not idle:
                if self.budget is None and count == 0:
                    break  # larger than the measured share even alone: tried anyway
                return None
            victim = idle.pop(0)
            victims.append(victim)
            used -= victim.offer.bytes_needed
            count -= 1
        for victim in victims:
            del self._loaded[victim.offer.name]
            log.info("unloading %s to make room for %s", victim.offer.name, offer.name)
        return victims

    def _wait(self, deadline: float, offer: ModelOffer) -> None:
        left = deadline - self._clock()
        if left <= 0 or not self._changed.wait(left):
            if self._clock() >= deadline:
                raise PoolError(f"the model '{offer.name}' cannot load: the loaded models stay "
                                "busy with replies (retry later)")

    def _reap(self) -> None:
        while True:
            with self._changed:
                if self._closed:
                    return
                ends = [e.expires for e in self._loaded.values()
                        if e.leases == 0 and not e.pinned and e.expires is not None]
                wait = max(0.0, min(ends) - self._clock()) if ends else None
                if wait is None or wait > 0:
                    self._changed.wait(wait if wait is None else min(wait, 60.0))
                if self._closed:
                    return
            self.expire()


def memory_available() -> int:
    """The memory available now (unknown: no limit, the count of loaded models alone holds)."""
    try:
        return machine().ram_available
    except (AttributeError, ValueError, OSError):  # (no sysconf: not a POSIX system)
        return 1 << 62


def _close(entry: Entry) -> None:
    try:
        entry.value.close()
    except Exception as e:  # one model's failure to close must not stop the others
        log.warning("closing %s failed: %r", entry.offer.name, e)


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
