"""The engines of one process share its cores (engine.runtime.quiet): one engine's idle work
waits while another answers or a model loads, and an idle step under way is told to stop."""

from __future__ import annotations

import threading

from engine.decode.speculative.params import SpeculativeParams
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.quiet import Quiet
from engine.runtime.runtime import Runtime, RuntimeConfig
from engine.runtime.service import Engine
from tests.conftest import model_path


class Stub:
    def __init__(self) -> None:
        self.preempt = threading.Event()
        self.woken = 0

    def wake(self) -> None:
        self.woken += 1


def test_busy_stops_the_others_and_the_last_one_idle_wakes_them() -> None:
    q = Quiet()
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


def test_idle_work_waits_for_a_load_elsewhere() -> None:
    q = Quiet()
    rt = Runtime(RuntimeConfig(target=ModelSpec(model_path("test")),
                               context=ContextParams(n_ctx=256),
                               speculative=SpeculativeParams(drafter="none"), kv_store_bytes=0))
    eng = Engine(rt, quiet=q)
    ran = threading.Event()
    try:
        with q.busy():
            eng.add_idle(lambda: ran.set() or False)
            assert eng.call(lambda: 1).result(timeout=60) == 1  # calls still run
            assert not eng.wait_until(lambda e: ran.is_set(), timeout=1.0)
        assert ran.wait(timeout=60)  # the load ended: it runs
    finally:
        eng.close()
