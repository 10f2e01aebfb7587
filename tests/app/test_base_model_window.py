"""A base model in the window (real Gemma 3 270M, no chat template): marked "completion only"
with a one-line notice, and a message is a raw prompt it continues (never a made-up template)."""

from __future__ import annotations

from tests.conftest import REPLY_WAIT_S, model_path

LONG_MS = REPLY_WAIT_S * 1000


def test_a_base_model_is_marked_and_continues_the_text(qtbot, window, driver, monkeypatch) -> None:
    from app.engine_link import worker_parts as worker_module

    raw: list[str] = []
    real = worker_module.completion_turn
    monkeypatch.setattr(worker_module, "completion_turn", lambda model, messages, *a: (
        raw.append(messages[-1].content), real(model, messages, *a))[1])
    info = driver.load(model_path("gemma"))
    assert not info.chats
    assert "completion only" in window.models.status.text()
    notice = window.state.notice
    assert notice is not None and "no chat template" in notice.text and "\n" not in notice.text
    window.controller.typing("Once upon a time")  # read ahead as it is typed, as one text too
    qtbot.waitUntil(lambda: window.state.typed_ahead is not None and
                    window.state.typed_ahead[0] == window.state.typed_ahead[1], timeout=LONG_MS)
    reply = driver.send("Once upon a time")
    assert raw == ["Once upon a time"] * 2 and reply.done.reason in ("stop", "length")
    turns = window.controller.current.turns
    assert [t.role for t in turns][-2:] == ["user", "assistant"] and turns[-1].text


def test_a_chat_model_is_not_marked(qtbot, window, driver, smol_path) -> None:
    info = driver.load(smol_path)
    assert info.chats and "completion only" not in window.models.status.text()
