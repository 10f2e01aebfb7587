"""The engines of one pool share its cores (engine.runtime.cores): one engine's idle work
waits while another answers or a model loads, and an idle step under way is told to stop."""

from __future__ import annotations

import threading

from engine.decode.speculative.params import SpeculativeParams
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.cores import Cores
from engine.runtime.runtime import Runtime, RuntimeConfig
from engine.runtime.service import Engine
from tests.conftest import REPLY_WAIT_S, model_path


class Stub:
    def __init__(self) -> None:
        self.preempt = threading.Event()
        self.woken = 0

    def wake(self) -> None:
        self.woken += 1


def test_busy_stops_the_others_and_the_last_one_idle_wakes_them() -> None:
    q = Cores()
    a, b, c = Stub(), Stub(), Stub()
    for e in (a, b, c):
        q.join(e)
    q.mark(a, True)
    assert b.preempt.is_set() and c.preempt.is_set() and not a.preempt.is_set()
    assert q.calm(a) and not q.calm(b)
    with q.busy():  # a load beside it
        q.mark(a, False)
        assert (b.woken, c.woken) == (0, 0)  # the load still runs
        assert not q.calm(a)
    assert (a.woken, b.woken, c.woken) == (1, 1, 1)
    assert q.calm(b)
    q.leave(b)
    q.mark(c, True)
    q.mark(c, False)
    assert (a.woken, b.woken) == (2, 1)  # b left: no longer woken


class Told(Cores):
    """A Cores that counts the times an engine asked whether it may do idle work and was told
    no: a test sees the engine decide, rather than giving it some time to."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0
        self.seen = threading.Condition()

    def calm(self, engine: object) -> bool:
        calm = super().calm(engine)
        if not calm:
            with self.seen:
                self.refused += 1
                self.seen.notify_all()
        return calm


def test_idle_work_waits_for_a_load_elsewhere() -> None:
    q = Told()
    rt = Runtime(RuntimeConfig(target=ModelSpec(model_path("test")),
                               context=ContextParams(n_ctx=256),
                               speculative=SpeculativeParams(drafter="none"), kv_store_bytes=0))
    eng = Engine(rt, cores=q)
    ran = threading.Event()

    def idle() -> bool:
        ran.set()
        with q.seen:
            q.seen.notify_all()
        return False

    try:
        with q.busy():
            eng.add_idle(idle)
            # calls still run; the count read on the engine's thread, as the call runs
            before = eng.call(lambda: q.refused).result(timeout=REPLY_WAIT_S)
            with q.seen:  # the engine, idle after the call, asks again and is told to wait
                assert q.seen.wait_for(lambda: q.refused > before or ran.is_set(), REPLY_WAIT_S)
            assert not ran.is_set()
        assert ran.wait(timeout=REPLY_WAIT_S)  # the load ended: it runs
    finally:
        eng.close()
