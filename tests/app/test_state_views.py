"""The views follow the app's state by subscription: each test changes ``AppState`` alone,
through its methods, and sees the window's views follow (nothing is loaded, no controller acts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.control.state import Notice
from app.engine_link.messages import LoadedModel
from app.views.main_window import MainWindow


@pytest.fixture
def window(qtbot, settings, home, tmp_path):
    from tests.app.conftest import quit_without_asking

    w = MainWindow(settings, autoload=False)
    qtbot.addWidget(w, before_close_func=quit_without_asking)
    w.show()
    yield w
    w.close()


def _model(path: Path) -> LoadedModel:
    return LoadedModel(path, "m", None, None, "ngram", None, 4096, 0.1, measuring=True)


def test_the_notice_follows_the_state(window) -> None:
    window.state.say(Notice("Something to know.", "error", until_load=True))
    assert window.notice.text() == "Something to know." and window.notice.kind == "error"
    window.state.say(None)
    assert window.notice.text() == ""


def test_the_models_bar_and_the_status_bar_follow_a_load(window, smol_path) -> None:
    window.state.load_started(smol_path)
    assert window.models.status.text() == f"Loading {smol_path.name}…"
    assert window.models.cancel_button.isVisibleTo(window)
    window.state.loaded(_model(smol_path))
    assert "loaded (4,096 tokens of context" in window.models.status.text()
    assert not window.models.cancel_button.isVisibleTo(window)
    assert window.status.labels["drafter"].text() == "drafter ngram"
    assert window.status.labels["context"].text() == "context 0 / 4,096"
    assert window.status.measuring  # measuring after the load
    window.state.measured(3, 4)
    assert "75%" in window.status.measuring
    window.state.measured(4, 4, "Measured.")
    assert not window.status.measuring
    window.state.load_failed("out of memory", Notice("Could not load the model: out of memory", "error"))
    assert window.models.status.text() == "Not loaded: out of memory"
    assert window.notice.text() == "Could not load the model: out of memory"


def test_the_page_and_the_first_run_panel_follow_the_state(window) -> None:
    window.state.starters_here = True
    window.state.show_page("first_run")
    assert window.stack.currentWidget() is window.first_run
    assert window.first_run.use_button.isVisibleTo(window)
    window.state.set_fetching(True)
    assert window.first_run.cancel_button.isVisibleTo(window)
    window.state.fetch_progressed(500_000_000, 1_000_000_000, "download")
    assert window.first_run.progress.value() == 500
    window.state.set_fetching(False)
    window.state.show_page("chat")
    assert window.stack.currentWidget() is window.chat_view


def test_the_models_bar_shows_the_choice_of_the_state(window, smol_path) -> None:
    window.state.choose(smol_path, smol_path)
    assert window.models.target() == smol_path and window.models.draft() == smol_path


def test_a_passing_message_and_the_measurement_never_share_the_status_bar(window, smol_path) -> None:
    """"Reading the prompt: …" used to be drawn over "Measuring this machine's speed…": one
    label on the left shows the passing message, else the measurement."""
    window.state.load_started(smol_path)
    window.state.loaded(_model(smol_path))
    window.state.measured(3, 4)
    note = window.status.note
    assert "75%" in note.text() and note.isVisibleTo(window)
    window.state.show_message("Reading the prompt: 1021 / 1024 tokens", 2000)
    assert note.text() == window.status.currentMessage() == "Reading the prompt: 1021 / 1024 tokens"
    window.state.measured(4, 4, "Speculative decoding is on.")
    assert note.text() == "Speculative decoding is on."
    window.status.clearMessage()
    assert note.text() == "" and not window.status.measuring
    window.state.measured(1, 4)
    assert "25%" in note.text()
