"""The loaded models of a server that offers several by name: loaded on their first request,
unloaded when idle past their time to live or when another needs the room.

``Fleet`` knows each model's name and the memory it will need (``Offer``: estimated from its
GGUF header before it loads). A request holds a ``Lease`` on its model for as long as it runs:
a leased model is never unloaded. To load one more, the least recently used model without a
lease is unloaded first, until the estimate fits the budget and the count ``max_loaded``; when
every loaded model is leased, the load waits for a lease to end. Two requests for a model that
is loading wait for the one load.

What a loaded model is (an engine thread and its runtime, for the server) is the caller's:
``load(offer)`` makes it, its ``close()`` frees it. Nothing here imports llama.cpp.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from engine.errors import DuetError
from engine.models.served import Offer

log = logging.getLogger(__name__)

# Defaults, as the other servers have them: llama-server's router keeps 4 models (--models-max);
# Ollama unloads after 5 minutes idle, LM Studio after 60. A desktop machine's memory is wanted
# back sooner than a server's: 30 minutes.
MAX_LOADED = 4
TTL_S = 30 * 60.0
BUDGET_SHARE = 0.8  # of the memory available when the server starts, for the models together
WAIT_S = 600.0  # how long a load waits for a leased model to be released before giving up


class Closable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T", bound=Closable)


class FleetError(DuetError):
    """A request the fleet cannot serve: an unknown name, a model larger than the budget."""


class UnknownModel(FleetError):
    pass


class LoadFailed(FleetError):
    """The model's file would not load (the message names it and says why)."""


class Loaded(Generic[T]):
    """One loaded model: what ``load`` made, its leases, and when it may be unloaded."""

    def __init__(self, offer: Offer, value: T, now: float, ttl_s: float) -> None:
        self.offer, self.value = offer, value
        self.leases = 0
        self.used = now  # the last lease's start or end
        self.ttl_s = ttl_s  # idle time before it unloads (< 0: never; 0: as its last lease ends)
        self.pinned = False  # adopted: its owner unloads it, never the fleet

    @property
    def expires(self) -> float | None:
        """When it unloads if nothing leases it (None: never)."""
        return None if self.ttl_s < 0 else self.used + self.ttl_s


class Lease(Generic[T]):
    """A request's hold on a loaded model; ``release`` once (later calls do nothing)."""

    def __init__(self, fleet: Fleet[T], loaded: Loaded[T]) -> None:
        self._fleet, self._loaded = fleet, loaded
        self.value: T = loaded.value
        self.offer = loaded.offer
        self._released = False

    def keep_alive(self, ttl_s: float) -> None:
        """Ollama's ``keep_alive``: the model's idle time to live from now on (0: unload once
        free; < 0: never)."""
        self._fleet.set_ttl(self._loaded, ttl_s)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._fleet.release(self._loaded)


class Fleet(Generic[T]):
    """The offered models by name, and the loaded ones (see the module's docstring).

    ``clock``: the time source for the time to live (tests pass their own and call ``expire``);
    ``reaper``: whether a thread of its own unloads expired models."""

    def __init__(self, offers: Iterable[Offer], load: Callable[[Offer], T], *,
                 budget: int, max_loaded: int = MAX_LOADED, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic, reaper: bool = True) -> None:
        if max_loaded < 1:
            raise ValueError("max_loaded must be >= 1")
        self.offers = tuple(offers)
        self.budget, self.max_loaded, self.ttl_s = budget, max_loaded, ttl_s
        self._load, self._clock = load, clock
        self._loaded: dict[str, Loaded[T]] = {}  # by offer name, least recently used first
        self._loading: dict[str, int] = {}  # name -> bytes reserved for a load under way
        self._failed: dict[str, str] = {}  # name -> why its last load failed
        self._changed = threading.Condition()
        self._closed = False
        self._reaper: threading.Thread | None = None
        if reaper:
            self._reaper = threading.Thread(target=self._reap, name="duet-fleet", daemon=True)
            self._reaper.start()

    # -- names ----------------------------------------------------------------------------
    def find(self, name: str) -> Offer:
        for offer in self.offers:
            if offer.answers_to(name):
                return offer
        raise UnknownModel(f"the model '{name}' does not exist (this server has "
                           f"{', '.join(repr(o.name) for o in self.offers)})")

    def status(self, offer: Offer) -> str:
        """loaded, loading or unloaded."""
        with self._changed:
            if offer.name in self._loaded:
                return "loaded"
            return "loading" if offer.name in self._loading else "unloaded"

    def loaded(self) -> list[Loaded[T]]:
        """The loaded models, most recently used first."""
        with self._changed:
            return list(reversed(self._loaded.values()))

    def failure(self, offer: Offer) -> str | None:
        """Why ``offer``'s last load failed (None: it did not)."""
        with self._changed:
            return self._failed.get(offer.name)

    def wait_until(self, predicate: Callable[[Fleet[T]], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked whenever the fleet changes)."""
        with self._changed:  # (a reentrant lock: the predicate may ask the fleet)
            return self._changed.wait_for(lambda: predicate(self), timeout)

    @property
    def used(self) -> int:
        """Bytes the loaded and loading models are estimated to need."""
        with self._changed:
            return self._used()

    def adopt(self, offer: Offer, value: T) -> None:
        """Serve ``value``, loaded by its owner, as ``offer``: never unloaded by the fleet
        (the window's own model, which its server shares)."""
        with self._changed:
            loaded = self._loaded[offer.name] = Loaded(offer, value, self._clock(), -1)
            loaded.pinned = True
            self._changed.notify_all()

    # -- leases ---------------------------------------------------------------------------
    def acquire(self, name: str, timeout: float = WAIT_S) -> Lease[T]:
        """A lease on the model ``name``, loaded first if it is not (blocking: minutes for a
        load). FleetError when it cannot be: unknown, larger than the budget, a failed load
        (naming the file), or every other model still leased after ``timeout`` seconds."""
        offer = self.find(name)
        if offer.bytes_needed > self.budget:
            raise FleetError(f"the model '{offer.name}' needs about {_gb(offer.bytes_needed)}, "
                             f"more than the models' memory budget ({_gb(self.budget)})")
        deadline = self._clock() + timeout
        with self._changed:
            while True:
                if self._closed:
                    raise FleetError("the server is stopping")
                loaded = self._loaded.get(offer.name)
                if loaded is not None:
                    return self._lease(loaded)
                if offer.name in self._loading:  # another request loads it: wait for that
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
            value = self._load(offer)
        except BaseException as e:
            with self._changed:
                del self._loading[offer.name]
                self._failed[offer.name] = str(e)
                self._changed.notify_all()
            if isinstance(e, DuetError):
                raise LoadFailed(f"could not load the model '{offer.name}' ({offer.path}): {e}") \
                    from None
            raise
        with self._changed:
            del self._loading[offer.name]
            loaded = self._loaded[offer.name] = Loaded(offer, value, self._clock(), self.ttl_s)
            self._changed.notify_all()
            return self._lease(loaded)

    def release(self, loaded: Loaded[T]) -> None:
        with self._changed:
            loaded.leases -= 1
            loaded.used = self._clock()
            self._changed.notify_all()  # a load waiting for room; the reaper (ttl 0)

    def set_ttl(self, loaded: Loaded[T], ttl_s: float) -> None:
        with self._changed:
            loaded.ttl_s = ttl_s
            self._changed.notify_all()

    # -- unloading ------------------------------------------------------------------------
    def unload(self, name: str) -> bool:
        """Unload the model ``name`` now, once its replies in flight are done (False: it was not
        loaded)."""
        offer = self.find(name)
        with self._changed:
            while True:
                loaded = self._loaded.get(offer.name)
                if loaded is None:
                    return False
                if loaded.pinned:
                    raise FleetError(f"the model '{offer.name}' is the window's own: unload it "
                                     "there")
                if loaded.leases == 0:
                    del self._loaded[offer.name]
                    self._changed.notify_all()
                    break
                self._changed.wait()
        _close(loaded)
        return True

    def expire(self) -> list[str]:
        """Unload every model idle past its time to live; their names."""
        now = self._clock()
        with self._changed:
            gone = [lo for lo in self._loaded.values() if lo.leases == 0 and not lo.pinned
                    and lo.expires is not None and lo.expires <= now]
            for lo in gone:
                del self._loaded[lo.offer.name]
            if gone:
                self._changed.notify_all()
        for lo in gone:
            log.info("unloading %s: idle for %.0f s", lo.offer.name, now - lo.used)
            _close(lo)
        return [lo.offer.name for lo in gone]

    def close(self) -> None:
        """Unload every model (their replies are cancelled by their own close)."""
        with self._changed:
            self._closed = True
            gone = [lo for lo in self._loaded.values() if not lo.pinned]
            self._loaded = {}
            self._changed.notify_all()
        for lo in gone:
            _close(lo)
        if self._reaper is not None:
            self._reaper.join(5)

    # -- under the lock -------------------------------------------------------------------
    def _lease(self, loaded: Loaded[T]) -> Lease[T]:
        loaded.leases += 1
        loaded.used = self._clock()
        self._loaded.pop(loaded.offer.name)  # most recently used last
        self._loaded[loaded.offer.name] = loaded
        return Lease(self, loaded)

    def _used(self) -> int:
        return sum(lo.offer.bytes_needed for lo in self._loaded.values()) + \
            sum(self._loading.values())

    def _make_room(self, offer: Offer) -> list[Loaded[T]] | None:
        """Take out the least recently used models without a lease until ``offer`` fits the
        budget and the count; those taken out (to close), or None (nothing taken) when it
        cannot fit while leased models stay."""
        victims: list[Loaded[T]] = []
        idle = [lo for lo in self._loaded.values()  # least recently used first
                if lo.leases == 0 and not lo.pinned]
        used = self._used()
        count = len(self._loaded) + len(self._loading)
        while used + offer.bytes_needed > self.budget or count + 1 > self.max_loaded:
            if not idle:
                return None
            victim = idle.pop(0)
            victims.append(victim)
            used -= victim.offer.bytes_needed
            count -= 1
        for victim in victims:
            del self._loaded[victim.offer.name]
            log.info("unloading %s to make room for %s", victim.offer.name, offer.name)
        return victims

    def _wait(self, deadline: float, offer: Offer) -> None:
        left = deadline - self._clock()
        if left <= 0 or not self._changed.wait(left):
            if self._clock() >= deadline:
                raise FleetError(f"the model '{offer.name}' cannot load: the loaded models stay "
                                 "busy with replies (retry later)")

    def _reap(self) -> None:
        while True:
            with self._changed:
                if self._closed:
                    return
                ends = [lo.expires for lo in self._loaded.values()
                        if lo.leases == 0 and not lo.pinned and lo.expires is not None]
                wait = max(0.0, min(ends) - self._clock()) if ends else None
                if wait is None or wait > 0:
                    self._changed.wait(wait if wait is None else min(wait, 60.0))
                if self._closed:
                    return
            self.expire()


def _close(loaded: Loaded) -> None:
    try:
        loaded.value.close()
    except Exception as e:  # one model's failure to close must not stop the others
        log.warning("closing %s failed: %r", loaded.offer.name, e)


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
