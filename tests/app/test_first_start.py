"""The first start through the window: chat before the verify cost is measured, and a load that
can be cancelled."""

from __future__ import annotations

import json

from app.engine_link.messages import Progress
from engine import paths
from engine.decode.speculative.tuning import TUNING
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def test_first_reply_comes_before_the_verify_cost_is_measured(qtbot, window, driver, smol_path,
                                                            settings) -> None:
    curves = paths.cache_dir() / "verify-cost.json"
    curves.unlink(missing_ok=True)  # a fresh home: no curve measured on this machine yet
    settings.update({"drafter": "ngram"})
    # the message is sent while the model loads, as a person would type at the first start
    with qtbot.waitSignal(window.controller.reply_finished, timeout=LONG_MS) as replied:
        window.load_models(smol_path)
        window.controller.send("Name two fruits.")
    assert replied.args[0].done.text.strip()
    first = replied.args[0].done.stats
    assert first.n_tokens > 0 and first.proposed == 0  # no curve yet: decoded plainly
    status = window.status
    events = driver.relay.events
    calibrating = [obj for name, obj in events if name == "progress" and obj.op == "calibrate"]
    assert all(p.done < p.total for p in calibrating)  # the measurement had not ended...
    assert "Measuring" in status.measuring  # ...and the window says so
    assert not curves.exists() or json.loads(curves.read_text()) == {}
    # between replies it goes on, and ends: its line goes, one line says drafting is on
    # the window and the test's relay each get the worker's signal through their own queued
    # call, in no set order: wait for the relay's record of the end, then look at the window
    def calibrated() -> list:
        return [obj for name, obj in events if name == "progress" and obj.op == "calibrate"
                and obj.done == obj.total]

    qtbot.waitUntil(lambda: bool(calibrated()), timeout=LONG_MS)
    qtbot.waitUntil(lambda: not status.measuring, timeout=LONG_MS)
    assert isinstance(calibrated()[-1], Progress)
    assert "Speculative decoding is on" in window.status.currentMessage()
    assert len(json.loads(curves.read_text())) == 1  # cached: the next start measures nothing
    spec = window.client.worker.runtime.speculation
    assert spec.cost is not None and [n for n, _ in spec.cost.verify_s] == \
        sorted(TUNING.calibration_sizes)
    order = [name for name, obj in events if name in ("tokens", "finished") or (
        name == "progress" and obj.op == "calibrate" and obj.done == obj.total)]
    assert order.index("tokens") < order.index("finished") < order.index("progress")
    assert driver.send("Repeat: apple, banana, apple, banana.").done.stats.n_tokens > 0
    # the next load finds the curve cached: nothing to measure
    info = driver.load(smol_path)
    assert not info.measuring and not status.measuring


def test_a_load_can_be_cancelled_and_the_window_loads_again(qtbot, window, driver,
                                                           smol_path) -> None:
    target = smol_path.parent / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    with qtbot.waitSignal(window.model_failed, timeout=LONG_MS) as failed:
        window.load_models(target if target.exists() else smol_path)
        assert window.models.cancel_button.isVisibleTo(window)  # Cancel, while "Loading…"
        window.models.cancel_button.click()
    failure = failed.args[0]
    assert failure.op == "load" and failure.cancelled
    assert window.notice.text() == "Loading was cancelled: choose a model and press Load."
    assert "\n" not in window.notice.text() and window.notice.kind == "info"
    assert not window.models.cancel_button.isVisibleTo(window)
    assert window.models.load_button.isEnabled() and window.models.target_combo.isEnabled()
    assert window.state.model is None and not window.state.loading
    info = driver.load(smol_path)  # another choice loads as usual
    assert info.target_path == smol_path
    assert driver.send("Say hi.").done.stats.n_tokens > 0


def test_nobody_chose_a_model_yet_so_the_starters_are_offered_with_one_button(
        qtbot, settings, home) -> None:
    from app.control.models import starter_pair
    from app.views.main_window import MainWindow
    from tests.app.conftest import Driver, quit_without_asking

    starters = starter_pair()
    assert starters is not None, "the test group fetches the starter models"
    assert not settings["target_model"]  # a fresh home: no choice saved
    w = MainWindow(settings, autoload=True)
    qtbot.addWidget(w, before_close_func=quit_without_asking)
    w.show()
    try:
        assert w.stack.currentWidget() is w.first_run and not w.state.loading  # nothing loads by itself
        assert w.first_run.use_button.isVisibleTo(w)
        assert not w.first_run.fetch_button.isVisibleTo(w)  # they are here: nothing to fetch
        with qtbot.waitSignal(w.model_loaded, timeout=LONG_MS) as loaded:
            w.first_run.use_button.click()
        assert (loaded.args[0].target_path, loaded.args[0].draft_path) == starters
        assert w.stack.currentWidget() is w.chat_view
        assert settings["target_model"] == str(starters[0])  # chosen now: loads at the next start
        assert Driver(qtbot, w).send("Say hi.").done.stats.n_tokens > 0
    finally:
        w.close()
