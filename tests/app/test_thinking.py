"""A reasoning model's ``<think>`` section: collapsed under a one-line header with its duration."""

from __future__ import annotations

from app.views.message_widget import MessageWidget
from engine.conversation.tree import Conversation, Turn
from engine.events import Token


def test_a_finished_thinking_section_is_collapsed(qtbot) -> None:
    turn = Turn("assistant", "<think>\nLet me count: 1, 2.\n</think>\n\nThe answer is **2**.",
                think_s=3.2)
    w = MessageWidget(turn)
    qtbot.addWidget(w)
    w.show()
    w.refresh(highlight_draft=True)
    assert w.think_button.isVisible() and w.think_button.text() == "▸ Thought for 3 s"
    assert not w.think_body.isVisible()
    assert w.body.toPlainText() == "The answer is 2."
    w.think_button.click()
    assert w.think_body.isVisible() and "Let me count" in w.think_body.toPlainText()
    assert w.think_button.text().startswith("▾")


def test_thinking_while_streaming_and_its_duration(qtbot) -> None:
    conv = Conversation()
    conv.add_user("q")
    turn = conv.begin_reply()
    conv.append_tokens([Token(1, "<think>"), Token(2, "hmm")])
    w = MessageWidget(turn)
    qtbot.addWidget(w)
    w.show()
    w.refresh(highlight_draft=True)
    assert w.think_button.text() == "▸ Thinking…" and not w.body.isVisible()
    conv.append_tokens([Token(3, "</think>"), Token(4, "Yes.")])
    assert turn.think_s is not None
    w.refresh(highlight_draft=True)
    assert w.think_button.text() == "▸ Thought briefly" and w.body.toPlainText() == "Yes."
    plain = MessageWidget(Turn("assistant", "No reasoning here."))
    qtbot.addWidget(plain)
    plain.refresh(highlight_draft=True)
    assert not plain.think_button.isVisibleTo(plain)


def test_a_reasoning_models_thinking_is_folded_in_the_window(qtbot, window, driver, tmp_path,
                                                             settings) -> None:
    """The 0.5B with DeepSeek-R1's template: the prompt opens the <think> section, so the reply
    starts inside it and never writes the opening marker; the window still shows it folded."""
    from tests.conftest import model_path
    from tests.reasoning_models import R1, template, with_template

    r1 = with_template(model_path("draft"), template(R1), tmp_path / "r1.gguf")
    settings.set("max_tokens", 12)
    driver.load(r1)
    reply = driver.send("Hi")
    turn = window.controller.current.turns[-1]
    assert turn.text.startswith("<think>") and reply.done.text.startswith("<think>")
    w = window.chat_view.widgets[-1]
    assert w.think_button.isVisible() and not w.think_body.isVisible()
    assert "<think>" not in w.body.toPlainText()


def test_the_think_switch_turns_a_conversations_thinking_off(qtbot, window, driver, tmp_path,
                                                             settings, smol_path) -> None:
    """Shown for a reasoning model only; off, the next reply's prompt closes the section (the
    reply answers at once) and the conversation keeps the choice."""
    from tests.conftest import model_path
    from tests.reasoning_models import R1, template, with_template

    r1 = with_template(model_path("draft"), template(R1), tmp_path / "r1.gguf")
    settings.set("max_tokens", 12)
    think = window.composer.think
    driver.load(smol_path)
    assert not think.isVisibleTo(window)  # SmolLM2 does not think
    driver.load(r1)
    assert think.isVisibleTo(window) and think.isChecked()
    think.click()
    conv = window.controller.current
    assert conv.settings["thinking"] is False and window.controller.chat_settings.thinking_for(conv) is False
    reply = driver.send("Hi")
    # on, the reply starts inside the section the prompt opened (the test above); off, the
    # prompt closed it: what the model writes is its answer (this small model's answer may
    # well be markup)
    assert not reply.done.text.startswith("<think>")
    assert not window.chat_view.widgets[-1].think_button.isVisible()
    window.controller.new()
    assert think.isChecked()  # a new conversation: the setting (on)
    window.controller.select(conv.id)
    assert not think.isChecked()
