"""The verify cost measured after the load (engine.decode.speculative.later), step by step between
replies (engine.runtime.service.Engine.add_idle), on the real SmolLM2."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import Sampler, SamplingParams
from engine.decode.speculative import calibration
from engine.decode.speculative.draft import Draft
from engine.decode.speculative.draft_model import CURVE_SIZES
from engine.decode.speculative.later import steps
from engine.decode.speculative.params import SpeculativeParams
from engine.decode.speculative.tuning import TUNING
from engine.events import Done
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig
from engine.runtime.service import Engine, Job
from tests.conftest import REPLY_WAIT_S

GREEDY = SamplingParams(temperature=0, max_tokens=16)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DUET_HOME", str(tmp_path))
    return tmp_path


def config(path: Path, drafter: str = "ngram", draft: Path | None = None) -> RuntimeConfig:
    return RuntimeConfig(target=ModelSpec(path), draft=ModelSpec(draft) if draft else None,
                         context=ContextParams(n_ctx=1024),
                         speculative=SpeculativeParams(drafter=drafter))


def test_a_runtime_without_a_curve_decodes_plainly_until_it_is_measured(smol_path: Path,
                                                                      fresh_cache: Path) -> None:
    with Runtime(config(smol_path, "auto", smol_path), measure=False) as rt:
        spec, later = rt.speculation, rt.later
        assert spec is not None and later is not None
        assert spec.cost is None and spec.track is None  # nothing measured at the load
        assert later.total == steps(TUNING.calibration_sizes) + steps(CURVE_SIZES)
        history = [5, 6, 7, 8, 5, 6, 7]  # a copy the n-gram drafter would offer
        spec.begin(history)
        assert spec.plan(history, 64, Sampler(GREEDY)).tokens == ()  # plain decoding
        rt.ctx.decode([1, 2, 3])  # the conversation's cache: the measurement leaves it alone
        n = 1
        while later.step():
            n += 1
        assert n == later.total == later.done and later.finished
        assert rt.ctx.n_past == 3
        assert spec.cost is not None and spec.track is not None \
            and spec.track.on_mismatch is not None
        assert calibration.lookup(rt.ctx) == spec.cost  # cached under the real context's key
        assert calibration.lookup(spec.draft_ctx, CURVE_SIZES) is not None
    with Runtime(config(smol_path, "auto", smol_path), measure=False) as again:
        assert again.later is None and again.speculation.cost == spec.cost  # the next start
        entries = json.loads((fresh_cache / "cache" / "verify-cost.json").read_text())
        assert len(entries) == 2
        # steps three times what the curve says (it was taken on a busy machine): forgotten
        for _ in range(TUNING.cost_check_passes):
            again.speculation.observe(Draft(), 0, 3 * spec.cost.verify_cost(1))
        assert calibration.lookup(again.ctx) is None
        assert calibration.lookup(again.speculation.draft_ctx, CURVE_SIZES) is not None


def test_a_job_runs_before_the_idle_work_goes_on(smol_path: Path) -> None:
    seen: list[str] = []
    ended, idled, finished = threading.Event(), threading.Event(), threading.Event()

    def idle() -> bool:  # more idle work until the reply ended, then one last step
        seen.append("idle")
        idled.set()
        if ended.is_set():
            finished.set()
        return not ended.is_set()

    def emit(item: object) -> None:
        seen.append(type(item).__name__)
        if isinstance(item, (Done, Exception)):
            ended.set()

    with Runtime(config(smol_path, "none")) as rt:
        engine = Engine(rt)
        engine.add_idle(idle)
        assert idled.wait(REPLY_WAIT_S)
        prompt = chat_tokens(rt.target, [Message("user", "Name a fruit.")])
        engine.submit(Job(prompt, GREEDY, emit))
        assert ended.wait(REPLY_WAIT_S)
        assert finished.wait(REPLY_WAIT_S)  # the idle work went on after the reply, and ended
        engine.close()
    start, end = seen.index("Token"), seen.index("Done")
    assert "idle" not in seen[start:end] and seen[-1] == "idle"


def test_a_request_that_arrives_stops_the_measurements_decode(smol_path: Path,
                                                              fresh_cache: Path) -> None:
    """The engine's ``preempt`` set: the step under way stops, nothing is counted, and the
    same step runs again (the curve comes out whole)."""
    with Runtime(config(smol_path), measure=False) as rt:
        later = rt.later
        assert later is not None and rt.speculation is not None
        preempt = threading.Event()
        later.step(preempt)  # the measurement's own context is made, its first slice read
        done = later.done
        preempt.set()
        assert later.step(preempt) and later.done == done  # stopped: not counted
        assert later.step(preempt) and later.done == done
        preempt.clear()
        while later.step(preempt):
            pass
        assert later.done == later.total and rt.speculation.cost is not None
