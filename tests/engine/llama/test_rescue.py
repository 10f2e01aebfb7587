"""engine.llama.rescue: the hooks run when a lost worker ends the process, and the relaunch choice."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from engine.llama import rescue
from tests.conftest import REPLY_WAIT_S


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv(rescue.RELAUNCHED_AT, raising=False)
    yield
    rescue.set_relaunch(None)


def test_hooks_run_guarded_and_a_hung_one_is_left_behind(monkeypatch):
    seen: list[str] = []
    failed, release = threading.Event(), threading.Event()

    def hangs(why: str) -> None:
        release.wait()

    def fails(why: str) -> None:
        failed.set()
        raise OSError("disk full")

    # rescue's clock, by state: the budget is spent once the two hooks that return at once have
    # run (they are waited for before the hung one, added last), however long they took
    budget = float(REPLY_WAIT_S)
    monkeypatch.setattr(rescue, "time", SimpleNamespace(
        monotonic=lambda: budget if failed.is_set() and seen else 0.0))
    with rescue.hook(fails), rescue.hook(seen.append), rescue.hook(hangs):
        assert rescue.run_hooks("worker lost", budget_s=budget) == 1
    release.set()
    assert seen == ["worker lost"]
    assert rescue.run_hooks("again") == 0  # the block removed them


def test_relaunch_only_when_set_and_not_just_relaunched(monkeypatch):
    assert rescue.relaunch_argv("why") is None
    rescue.set_relaunch(lambda why: ["/bin/duet", "--worker-lost", why])
    assert rescue.relaunch_argv("why") == ["/bin/duet", "--worker-lost", "why"]
    monkeypatch.setenv(rescue.RELAUNCHED_AT, f"{time.time():.0f}")  # a worker that keeps failing
    assert rescue.relaunch_argv("why") is None
    monkeypatch.setenv(rescue.RELAUNCHED_AT, f"{time.time() - 2 * rescue.MIN_RELAUNCH_GAP_S:.0f}")
    assert rescue.relaunch_argv("why") is not None
    rescue.set_relaunch(lambda why: 1 / 0)
    assert rescue.relaunch_argv("why") is None
