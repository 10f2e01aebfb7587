"""A preset chosen for one conversation: its system prompt and sampling, and what a change of
system prompt in a chat with history means (no model needed)."""

from __future__ import annotations

from engine.conversation.presets import preset
from engine.events import Done, Stats


def test_a_preset_applies_to_its_conversation_only(qtbot, window, settings) -> None:
    c = window.controller
    a = c.current
    a.add_user("hi", "old prompt")
    a.begin_reply()
    a.finish_reply(Done("stop", "hello", (1,), Stats()))
    bar = window.presets
    bar.presets.append(preset("Poet", "Write in verse.\nAlways.", temperature=1.3, max_tokens=50))
    bar._fill()
    bar.combo.activated.emit(bar.combo.findText("Poet"))  # the user picks it
    assert [t.text for t in a.turns] == ["Write in verse.\nAlways.", "hi", "hello"]
    assert a.versions(0) == (2, 2) and a.preset == "Poet"
    assert "nothing after the change is reused" in window.notice.text()
    assert "2 messages" in window.notice.text()
    assert window.presets.combo.currentText() == "Poet"
    p = c.chat_settings.sampling_for(a)
    assert p.temperature == 1.3 and p.max_tokens == 50
    b = c.new()
    assert c.chat_settings.sampling_for(b).temperature == settings["temperature"]  # other chats keep theirs
    assert window.presets.combo.currentIndex() == 0
    b.add_user("q", c.chat_settings.system_prompt(b))
    assert [t.role for t in b.turns] == ["user"]  # no system prompt in the settings
    c.select(a.id)
    assert window.presets.combo.currentText() == "Poet"
