"""The main window with the real SmolLM2: send, stream, stop, regenerate, edit, errors."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def test_send_streams_then_finishes(qtbot, window, driver, smol_path) -> None:
    info = driver.load(smol_path)
    assert "SmolLM2" in window.models.status.text() and info.n_ctx >= 2048
    edit = window.composer.edit
    qtbot.keyClicks(edit, "Name two fruits.")
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert edit.toPlainText() == "Name two fruits.\n"  # Shift+Enter: a new line, not a send
    qtbot.keyClicks(edit, "Be brief.")
    seen: list[str] = []
    driver.relay.tokens.connect(lambda _b: seen.append(window.chat_view.widgets[-1].body.toPlainText()))
    reply = driver.finish(lambda: qtbot.keyClick(edit, Qt.Key.Key_Return))
    conv = window.controller.current
    assert [t.role for t in conv.turns] == ["user", "assistant"]
    assert conv.turns[0].text == "Name two fruits.\nBe brief."
    assert edit.toPlainText() == ""
    assert conv.turns[1].text == reply.done.text and reply.done.text.strip()
    assert seen, "no streamed update reached the view"
    assert window.chat_view.widgets[-1].body.toPlainText().strip()
    assert window.composer.button.text() == "Send"
    assert "tok/s" in window.status.labels["speed"].text()
    assert window.status.labels["context"].text() == f"context {reply.n_past:,} / {reply.n_ctx:,}"
    assert window.windowTitle().startswith("Name two fruits")
    assert window.sidebar.list.current_text().startswith("Name two fruits")


def test_stop_cancels_the_reply(qtbot, window, driver, smol_path, settings, held_replies) -> None:
    settings.set("max_tokens", 400)
    driver.load(smol_path)
    window.controller.send("Write a very long story about the sea.")
    assert window.composer.button.text() == "Stop"
    qtbot.waitUntil(lambda: len(window.controller.current.turns[-1].text) > 10, timeout=LONG_MS)
    reply = driver.finish(window.composer.button.click)
    assert reply.done.reason == "cancelled" and reply.done.stats.n_tokens < 400
    turn = window.controller.current.turns[-1]
    assert turn.reason == "cancelled" and "stopped" in window.chat_view.widgets[-1].meta_label.text()
    assert window.composer.button.text() == "Send"
    # Esc in the composer stops too: pressed right after sending, so that the reply (whose
    # length no test controls: it may end on its own within a few tokens) is still running
    def send_and_escape() -> None:
        window.controller.send("And another long one about mountains.")
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)

    reply = driver.finish(send_and_escape)
    assert reply.done.reason == "cancelled"


def test_regenerate_reuses_the_prompt_cache(qtbot, window, driver, smol_path) -> None:
    driver.load(smol_path)
    first = driver.send("What is the capital of France?")
    conv = window.controller.current
    reply_widget = window.chat_view.widgets[-1]
    assert reply_widget.regen_button.isVisible() and not reply_widget.edit_button.isVisible()
    again = driver.finish(reply_widget.regen_button.click)
    assert [t.role for t in conv.turns] == ["user", "assistant"]
    assert again.done.text == first.done.text  # greedy: the same reply
    stats = again.done.stats
    assert stats.n_cached_tokens == stats.n_prompt_tokens - 1  # the whole prompt was cached


def test_edit_and_resend_recomputes_only_the_tail(qtbot, window, driver, smol_path) -> None:
    driver.load(smol_path)
    driver.send("My name is Ada. Remember it.")
    driver.send("What is two plus two?")
    conv = window.controller.current
    user_widget = window.chat_view.widgets[2]
    assert user_widget.edit_button.isVisible()
    user_widget.edit_button.click()
    assert user_widget.editor.isVisible() and user_widget.editor.toPlainText() == "What is two plus two?"
    user_widget.editor.setPlainText("What is my name?")
    send = [b for b in user_widget.edit_row.findChildren(type(window.composer.button))
            if b.text() == "Send"][0]
    reply = driver.finish(send.click)
    assert [t.text for t in conv.turns[:3]] == [
        "My name is Ada. Remember it.", conv.turns[1].text, "What is my name?"]
    assert len(conv.turns) == 4
    stats = reply.done.stats
    assert 0 < stats.n_cached_tokens < stats.n_prompt_tokens  # the first exchange was reused


def test_bad_model_shows_a_message_and_the_app_keeps_working(qtbot, window, driver, smol_path,
                                                            tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)  # right magic, nothing else
    with qtbot.waitSignal(window.model_failed, timeout=LONG_MS) as blocker:
        window.load_models(bad)
    assert blocker.args[0].op == "load"
    assert "Could not load the model" in window.notice.text()
    assert window.models.status.text().startswith("Not loaded")
    # sending without a model is refused with a message, the text is kept
    window.controller.send("hello?")
    assert "Load" in window.notice.text() and window.composer.edit.toPlainText() == "hello?"
    driver.load(smol_path)
    assert driver.send("Say hi.").done.stats.n_tokens > 0


def test_full_context_is_reported_and_the_app_keeps_working(qtbot, window, driver, smol_path,
                                                           settings) -> None:
    settings.update({"n_ctx": 256, "max_tokens": 400})
    driver.load(smol_path)
    reply = driver.send("Write a long story about the sea.")
    assert reply.done.reason == "context_full" and reply.n_past >= reply.n_ctx - 1
    assert "context is full" in window.notice.text()
    # a prompt that cannot fit at all fails with a readable line
    with qtbot.waitSignal(window.controller.request_failed, timeout=LONG_MS):
        window.controller.new()
        window.controller.send("word " * 600)
    assert "too long for the context" in window.notice.text()
    assert window.composer.edit.toPlainText() == "word " * 600  # kept, editable
    assert window.composer.button.text() == "Send"
    window.composer.edit.clear()
    window.controller.new()
    assert driver.send("Hi.").done.stats.n_tokens > 0


def test_incompatible_draft_is_refused_with_its_reason(qtbot, window, driver, smol_path,
                                                      settings) -> None:
    from engine.runtime.runtime import STARTER_FILES

    gemma = smol_path.parent / STARTER_FILES["gemma"]
    settings.update({"drafter": "auto"})
    info = driver.load(smol_path, gemma)
    assert info.draft_problem
    status = window.models.status.text()
    assert "draft refused" in status and info.draft_problem in status
    assert "draft model was not used" in window.notice.text()
    assert driver.send("Say hi.").done.stats.n_tokens > 0
