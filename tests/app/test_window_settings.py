"""Settings through the window (dialog, persisted, applied), draft highlighting, models, first run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent, QPalette
from PySide6.QtWidgets import QApplication

from app.control.settings import DEFAULTS
from app.views import theme
from app.views.settings_dialog import RELOAD_MARK
from engine.errors import FetchError
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def _record_requests(window) -> list:
    """Wrap the client's chat() to see the requests the GUI builds."""
    requests = []
    original = window.client.chat

    def chat(*args, **kwargs):
        req = original(*args, **kwargs)
        requests.append(req)
        return req

    window.client.chat = chat
    return requests


def test_dialog_persists_and_applies_settings(qtbot, window, driver, smol_path, settings) -> None:
    driver.load(smol_path)
    requests = _record_requests(window)
    driver.send("Hi.")
    assert requests[-1].sampling.temperature == 0.0

    dialog = window.settings_dialog()
    labels = {o: w for o, w in dialog.editors.items()}
    assert "temperature" in labels and "target_model" not in labels  # hidden state stays hidden
    dialog.editors["temperature"].setValue(0.9)
    dialog.editors["top_k"].setValue(12)
    dialog.editors["seed"].setValue(1234)
    dialog.editors["n_ctx"].setValue(1024)
    dialog.accept()
    assert set(dialog.changed) == {"temperature", "top_k", "seed", "n_ctx"}

    data = json.loads(settings.path.read_text())
    assert data["version"] == 2
    assert data["values"]["temperature"] == 0.9 and data["values"]["n_ctx"] == 1024

    # "reload" options wait for the next load, and the window says so...
    assert "Context size" in window.notice.text() and "next model load" in window.notice.text()
    with qtbot.waitSignal(window.model_loaded, timeout=LONG_MS) as loaded:
        window.notice.action.click()  # "Reload now"
    assert loaded.args[0].n_ctx == 1024
    assert "next model load" not in window.notice.text()
    # ..."now" ones reach the next request
    driver.send("Hi again.")
    sampling = requests[-1].sampling
    assert (sampling.temperature, sampling.top_k, sampling.seed) == (0.9, 12, 1234)


def test_dialog_marks_reload_options(qtbot, window) -> None:
    from PySide6.QtWidgets import QLabel

    dialog = window.settings_dialog()
    assert dialog.editors["temperature"].value() == 0.0  # shows the current values
    texts = [label.text() for label in dialog.findChildren(QLabel)]
    assert any(t.startswith("Context size") and t.endswith(RELOAD_MARK) for t in texts)
    assert any(t == "Temperature" for t in texts)
    assert any("next model load" in t for t in texts)
    dialog.editors["top_k"].setValue(3)
    dialog.restore_defaults()
    assert dialog.values() == {o: v for o, v in DEFAULTS.items() if o in dialog.editors}
    dialog.reject()
    assert window.settings["top_k"] == 40 and window.settings["temperature"] == 0.0  # unchanged


def test_draft_highlighting_with_the_ngram_drafter(qtbot, window, driver, smol_path, settings) -> None:
    settings.update({"drafter": "ngram", "highlight_draft": True,  # drafts whatever it costs
                     "adaptive": False, "max_tokens": 64})
    info = driver.load(smol_path)
    assert info.drafter == "ngram" and window.status.labels["drafter"].text() == "drafter ngram"
    reply = driver.send("Repeat this list twice: apple, banana, cherry, grape, lemon, mango, "
                        "orange, peach, pear, plum.")
    stats = reply.done.stats
    assert stats.proposed > 0 and stats.accepted > 0
    turn = window.controller.current.turns[-1]
    assert turn.spans  # character spans of drafted tokens
    doc = window.chat_view.widgets[-1].body.document()

    def tinted() -> int:
        count, block = 0, doc.begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                f = it.fragment()
                if f.charFormat().background().color() == theme.colors().draft_bg:
                    count += f.length()
                it += 1
            block = block.next()
        return count

    assert tinted() > 0
    assert "accepted" in window.status.labels["acceptance"].text()
    assert "%" in window.chat_view.widgets[-1].meta_label.text()
    settings.set("highlight_draft", False)  # applies at once
    assert tinted() == 0
    settings.set("highlight_draft", True)
    assert tinted() > 0


def test_theme_applies_at_once(qtbot, window, settings) -> None:
    settings.set("theme", "dark")
    app = QApplication.instance()
    assert app.palette().color(QPalette.ColorRole.Window).lightness() < 128
    assert theme.colors() is theme.DARK_COLORS
    settings.set("theme", "light")
    assert app.palette().color(QPalette.ColorRole.Window).lightness() > 128
    settings.set("theme", "system")


def test_dropping_a_gguf_loads_it(qtbot, window, smol_path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(smol_path))])
    event = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime,
                       Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.model_loaded, timeout=LONG_MS) as loaded:
        window.dropEvent(event)
    assert loaded.args[0].target_path == smol_path
    assert window.models.target() == smol_path


@pytest.fixture
def empty_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "no-models"
    folder.mkdir()
    monkeypatch.setenv("DUET_MODELS_DIR", str(folder))
    return folder


def test_first_run_offers_fetch_with_progress_and_cancel(qtbot, settings, home, empty_models,
                                                         monkeypatch, relay_for) -> None:
    import engine.models.fetch

    def fake_fetch(model, dest_dir, *, progress=None, cancel=None):
        progress(engine.models.fetch.FetchProgress(model.key, "download", 10, 1000))
        # held mid-download until the test cancels (the wait's bound is a safety net only)
        if not cancel.wait(REPLY_WAIT_S):
            raise AssertionError("the test cancels before the end")
        raise FetchError(f"{model.key}: cancelled")

    monkeypatch.setattr(engine.models.fetch, "fetch", fake_fetch)
    from app.views.main_window import MainWindow

    w = MainWindow(settings, autoload=False)
    qtbot.addWidget(w)
    w.show()
    try:
        assert w.stack.currentWidget() is w.first_run  # no model anywhere: the first-run panel
        w.first_run.fetch_button.click()
        assert w.first_run.cancel_button.isVisibleTo(w) and not w.first_run.fetch_button.isEnabled()
        qtbot.waitUntil(lambda: w.first_run.progress.value() > 0, timeout=LONG_MS)
        assert "download" in w.first_run.progress_label.text()
        with qtbot.waitSignal(w.model_failed, timeout=LONG_MS) as failed:
            w.first_run.cancel_button.click()
        assert failed.args[0].op == "fetch" and "cancelled" in failed.args[0].message
        assert "stopped" in w.notice.text() and w.first_run.fetch_button.isEnabled()
    finally:
        w.close()


def test_measuring_the_verify_cost_again_shows_its_progress(qtbot, window, driver, settings,
                                                           smol_path) -> None:
    settings.update({"drafter": "ngram"})
    driver.load(smol_path)  # measured after it if the session's cache had no curve for it
    status = window.status
    qtbot.waitUntil(lambda: not status.measuring, timeout=LONG_MS)
    driver.relay.events.clear()
    with qtbot.waitSignal(window.model_loaded, timeout=LONG_MS) as loaded:
        window.flow.recalibrate()  # forgets the curves and reloads: measured again, with progress
    assert loaded.args[0].measuring and status.measuring

    def measured() -> list:
        """The measurement's steps as the relay got them since the reload. The relay and the
        window take the worker's signal each through its own queued call, so the measurement
        can leave the status bar before the relay has the last step: the test waits for both."""
        events = driver.relay.events
        start = next((i for i, (n, _) in enumerate(events) if n == "loaded"), len(events))
        return [o for n, o in events[start:] if n == "progress" and o.op == "calibrate"]

    qtbot.waitUntil(lambda: not status.measuring
                    and any(p.done == p.total for p in measured()), timeout=LONG_MS)
    steps = measured()
    assert [p.done for p in steps] == sorted(p.done for p in steps) and len(steps) > 1
    assert steps[-1].done == steps[-1].total and "Speculative decoding is on" in steps[-1].text
    assert "Speculative decoding is on" in window.status.currentMessage()
