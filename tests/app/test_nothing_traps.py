"""Nothing traps the window: unusual presets reply, a refused or failed reply ends the
"generating" state with one line and the message back in the composer, and the chat can
send again (the real window, the real SmolLM2)."""

from __future__ import annotations

import pytest

from engine.conversation.presets import preset
from engine.errors import DuetError
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def choose_preset(window, p) -> None:
    """The user picks ``p`` in the preset bar of the conversation shown."""
    bar = window.presets
    if p not in bar.presets:
        bar.presets.append(p)
        bar._fill()
    bar.combo.activated.emit(bar.combo.findText(p.name))


def send_and_settle(qtbot, window, text: str) -> None:
    """Send ``text`` as the user does and wait until the window is no longer generating (a
    reply or a failure: either ends it)."""
    edit = window.composer.edit
    edit.setPlainText(text)
    window.composer.button.click()
    qtbot.waitUntil(lambda: window.controller.generating is None, timeout=LONG_MS)


def ready_to_send(window) -> bool:
    return window.controller.generating is None and window.composer.button.text() == "Send" \
        and not window.chat_view.widgets[-1].turn.streaming


@pytest.mark.parametrize("values", [{"top_p": 0.0}, {"min_p": 1.0}], ids=["top_p=0", "min_p=1"])
def test_a_preset_that_keeps_one_token_replies_and_sends_again(qtbot, window, driver, smol_path,
                                                              settings, values) -> None:
    settings.set("drafter", "auto")  # drafts are verified under these sampling values too
    driver.load(smol_path)
    choose_preset(window, preset("One", "", temperature=0.8, seed=7, max_tokens=16, **values))
    conv = window.controller.current
    for text in ("Say hi.", "Say hi again."):
        send_and_settle(qtbot, window, text)
        reply = conv.turns[-1]
        assert reply.role == "assistant" and reply.text.strip() and reply.reason != "error"
        assert ready_to_send(window) and "failed" not in window.notice.text()
    assert [t.role for t in conv.turns] == ["user", "assistant", "user", "assistant"]
    assert driver.relay.of("failed") == []


def test_a_preset_without_a_drafter_turns_drafting_off_for_its_chat(qtbot, window, driver,
                                                                    smol_path, settings) -> None:
    settings.set("drafter", "auto")
    info = driver.load(smol_path)
    assert info.drafter != "none"
    choose_preset(window, preset("Plain", "", drafter="none", temperature=0.0, max_tokens=40))
    assert window.controller.current.preset == "Plain"
    assert settings["drafter"] == "auto"  # the other chats still draft: nothing to reload
    assert "next model load" not in window.notice.text()
    for text in ("Say hi.", "Say hi again."):  # the second repeats the first: n-grams would match
        reply = driver.send(text)
        assert reply.done.stats.n_tokens > 0
        assert reply.done.stats.proposed == 0 and not any(reply.done.stats.drafters_used.values())
    assert driver.relay.of("failed") == []


@pytest.mark.logs_errors  # the worker logs the unexpected error's traceback
def test_a_request_refused_before_the_reply_gives_the_message_back(qtbot, window, driver,
                                                                   smol_path, monkeypatch) -> None:
    import app.engine_link.worker_parts

    driver.load(smol_path)
    real = app.engine_link.worker_parts.prepare

    def refuse(*args, **kwargs):
        raise RuntimeError("the prompt could not be built")

    monkeypatch.setattr(app.engine_link.worker_parts, "prepare", refuse)
    send_and_settle(qtbot, window, "Hello there.")
    assert window.notice.text() == \
        "The reply failed: unexpected error: RuntimeError: the prompt could not be built"
    assert window.composer.edit.toPlainText() == "Hello there."  # back, editable
    assert window.controller.current.turns == [] and window.composer.button.text() == "Send"
    monkeypatch.setattr(app.engine_link.worker_parts, "prepare", real)
    send_and_settle(qtbot, window, window.composer.edit.toPlainText())
    assert [t.role for t in window.controller.current.turns] == ["user", "assistant"]
    assert window.controller.current.turns[-1].text.strip() and window.notice.text() == ""


def test_a_message_given_back_keeps_what_was_typed_since(qtbot, window, driver, smol_path,
                                                        settings) -> None:
    settings.set("n_ctx", 256)
    driver.load(smol_path)
    with qtbot.waitSignal(window.controller.request_failed, timeout=LONG_MS):
        window.controller.send("word " * 600)
        window.composer.edit.setPlainText("typed meanwhile")
    assert window.composer.edit.toPlainText() == "word " * 600 + "\n\ntyped meanwhile"
    assert "too long for the context" in window.notice.text()


@pytest.mark.parametrize("after", [0, 3], ids=["in the prompt", "mid-reply"])
def test_a_reply_that_fails_ends_with_one_line_and_the_chat_goes_on(qtbot, window, driver,
                                                                    smol_path, settings,
                                                                    monkeypatch, after) -> None:
    """The engine fails a pass: while reading the prompt (nothing of the reply yet: the message
    goes back to the composer) or after a few tokens (the reply so far is kept, marked)."""
    import engine.decode.scheduler

    settings.set("max_tokens", 24)
    driver.load(smol_path)
    real = engine.decode.scheduler.decode_batch
    calls = [0]

    def failing(parts, cancel=None):
        calls[0] += 1
        if calls[0] > after:
            raise DuetError("llama_decode returned -3")
        return real(parts, cancel)

    monkeypatch.setattr(engine.decode.scheduler, "decode_batch", failing)
    send_and_settle(qtbot, window, "Count to twenty.")
    assert window.notice.text() == "The reply failed: llama_decode returned -3"
    assert window.composer.button.text() == "Send"
    conv = window.controller.current
    if after == 0:
        assert window.composer.edit.toPlainText() == "Count to twenty." and conv.turns == []
    else:
        assert window.composer.edit.toPlainText() == ""
        assert [t.role for t in conv.turns] == ["user", "assistant"]
        assert conv.turns[-1].text and conv.turns[-1].reason == "error"
        assert "failed" in window.chat_view.widgets[-1].meta_label.text()
    monkeypatch.setattr(engine.decode.scheduler, "decode_batch", real)
    reply = driver.send("Say hi.")
    assert reply.done.stats.n_tokens > 0 and conv.turns[-1].text == reply.done.text
