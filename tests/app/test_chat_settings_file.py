"""A conversation's own settings come back from its .duet file through the settings' checks: a
value out of range (``temperature: 9``) gets a one-line notice and the default, and the
conversation answers as usual (it never stays marked as generating)."""

from __future__ import annotations

from app.control.settings import chat_settings
from engine.chat.messages import Message
from engine.conversation.session import store
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def test_values_out_of_range_are_left_out_with_a_line_each() -> None:
    kept, refused = chat_settings({"temperature": 9, "top_k": 5, "bogus": 1, "theme": "dark"})
    assert kept == {"top_k": 5}
    assert len(refused) == 3 and all("\n" not in line for line in refused)
    assert any("temperature" in line for line in refused)


def test_a_file_with_a_bad_setting_opens_with_a_notice_and_answers(qtbot, window, driver, smol,
                                                                   smol_path, tmp_path) -> None:
    path = tmp_path / "odd.duet"
    with LlamaSequence(smol, ContextParams(n_ctx=256)) as ctx:
        store.save_contexts(path, ctx, None, [Message("user", "Hi."), Message("assistant", "Hello.")],
                            settings={"chat": {"temperature": 9, "top_k": 5}}, with_kv=False)
    driver.load(smol_path)
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS):
        window.controller.files.open_path(path)
    conv = window.controller.current
    assert conv.settings == {"top_k": 5}
    assert "odd.duet" in window.notice.text() and "temperature" in window.notice.text()
    reply = driver.send("Say one word.")
    assert reply.done.reason in ("stop", "length") and window.controller.generating is None
