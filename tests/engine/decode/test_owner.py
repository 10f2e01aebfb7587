"""The scheduler belongs to one thread (engine.decode.owner): with the check on, as in the whole
suite, an entry point called from another thread fails at once; the engine's thread claims it
when the runtime is handed over. Real SmolLM2."""

from __future__ import annotations

import threading

import pytest

from engine.decode.owner import Owner, checking
from engine.decode.speculative.params import SpeculativeParams
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig
from engine.runtime.service import Engine
from tests.conftest import REPLY_WAIT_S, model_path


def on_thread(fn) -> BaseException | None:
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - the test reads it
            raised.append(e)

    t = threading.Thread(target=run, name="elsewhere")
    t.start()
    t.join(REPLY_WAIT_S)
    return raised[0] if raised else None


def test_the_check_is_on_in_the_suite_and_names_both_threads() -> None:
    assert checking()
    owner = Owner("the thing")
    owner.check()  # the first thread seen owns it
    error = on_thread(owner.check)
    assert isinstance(error, AssertionError) and "MainThread, not elsewhere" in str(error)
    on_thread(owner.claim)
    with pytest.raises(AssertionError, match="elsewhere, not MainThread"):
        owner.check()


def test_a_handed_over_scheduler_is_the_engine_threads_alone() -> None:
    rt = Runtime(RuntimeConfig(target=ModelSpec(model_path("test")),
                               context=ContextParams(n_ctx=256),
                               speculative=SpeculativeParams(drafter="none"), kv_store_bytes=0))
    engine = Engine(rt)
    try:
        assert engine.call(lambda: engine.scheduler.step()).result(REPLY_WAIT_S) is False
        with pytest.raises(AssertionError, match="owned by the thread duet-engine"):
            engine.scheduler.cancel_all()  # this thread is not the engine's
    finally:
        engine.close()
