"""Conversations as people use them, in the window (offscreen, real SmolLM2 where a model is
needed): versions of replies and messages, Continue, a too-long message, figures and notices
that belong to their conversation, reopened conversations, failed model loads, the draft mark
and Markdown in user messages."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from PySide6.QtGui import QTextCharFormat, QTextDocument

from app.engine_link.messages import ChatReply, TokenBatch
from engine.events import Done, Stats, Token
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def _versions(widget) -> str:
    return widget.version_label.text() if widget.version_label.isVisibleTo(widget) else ""


def test_regenerate_keeps_the_old_reply_and_switching_keeps_the_cache(qtbot, window, driver,
                                                                     smol_path, settings) -> None:
    settings.update({"temperature": 0.9, "seed": -1})
    driver.load(smol_path)
    first = driver.send("Name a colour.")
    second = driver.finish(window.chat_view.widgets[-1].regen_button.click)
    conv = window.controller.current
    reply = window.chat_view.widgets[-1]
    assert _versions(reply) == "2/2" and conv.turns[-1].text == second.done.text
    reply.prev_button.click()
    assert conv.turns[-1].text == first.done.text
    assert window.chat_view.widgets[-1].turn.text == first.done.text
    assert _versions(window.chat_view.widgets[-1]) == "1/2"
    # the next reply continues from the version shown, reusing the shared prefix
    settings.set("temperature", 0.0)
    follow = driver.send("Why?")
    sent = [m.content for m in conv.engine_messages()]
    assert sent[:2] == ["Name a colour.", first.done.text] and len(conv.turns) == 4
    stats = follow.done.stats
    assert stats.n_cached_tokens > 10  # the cache was rewound to the fork, never cleared


def test_edit_makes_a_branch_and_the_old_one_stays(qtbot, window, driver, smol_path) -> None:
    driver.load(smol_path)
    driver.send("My name is Ada.")
    conv = window.controller.current
    old = [t.text for t in conv.turns]
    driver.finish(lambda: window.controller.edit(0, "My name is Bob."))
    assert conv.turns[0].text == "My name is Bob." and len(conv.turns) == 2
    user = window.chat_view.widgets[0]
    assert _versions(user) == "2/2"
    user.prev_button.click()
    assert [t.text for t in conv.turns] == old


def test_continue_after_the_length_limit(qtbot, window, driver, smol_path, settings) -> None:
    settings.set("max_tokens", 8)
    driver.load(smol_path)
    reply = driver.send("Write a long story about a lighthouse keeper.")
    assert reply.done.reason == "length"
    widget = window.chat_view.widgets[-1]
    assert widget.continue_button.isVisibleTo(widget)
    assert window.notice.action.text() == "Continue"
    conv = window.controller.current
    before = conv.turns[-1].text
    more = driver.finish(widget.continue_button.click)
    assert len(conv.turns) == 2 and conv.turns[-1].text == before + more.done.text
    assert more.done.text and more.done.stats.n_prompt_tokens - more.done.stats.n_cached_tokens <= 2


def test_a_too_long_message_goes_back_to_the_composer_with_an_offer(qtbot, window, driver,
                                                                  smol_path, settings) -> None:
    settings.update({"n_ctx": 256})
    driver.load(smol_path)
    text = "word " * 400
    with qtbot.waitSignal(window.controller.request_failed, timeout=LONG_MS):
        window.controller.send(text.strip())
    conv = window.controller.current
    assert not [t for t in conv.turns if t.role == "user"]
    assert window.composer.edit.toPlainText() == text.strip()
    assert "too long" in window.notice.text()
    window.notice.action.click()  # Raise the context
    assert settings["n_ctx"] == 512


def test_live_figures_and_notices_belong_to_their_conversation(qtbot, window, monkeypatch) -> None:
    import app.control.live_figures

    now = [100.0]  # the controller's clock, moved by the test: the batches' times are known
    monkeypatch.setattr(app.control.live_figures, "time", SimpleNamespace(monotonic=lambda: now[0]))
    c = window.controller
    a = c.current
    a.add_user("hello")
    a.begin_reply()
    c.library.generating = a.id
    c.on_tokens(TokenBatch(a.id, (Token(1, "x"),)))
    assert window.status.labels["speed"].text() == "— tok/s"
    now[0] += 0.5  # the second batch comes later: 2 tokens after the first in 0.5 s
    c.on_tokens(TokenBatch(a.id, (Token(2, "y", True), Token(3, "z", True))))
    assert window.status.labels["speed"].text() == "4.0 tok/s"
    assert window.status.labels["acceptance"].text() == "drafted 67%"
    done = Done("length", "xyz", (1, 2, 3), Stats(n_tokens=3, gen_s=0.1, proposed=4,
                                                   accepted=2))
    c.on_finished(ChatReply(a.id, done, 40, 2048))
    assert window.status.labels["context"].text() == "context 40 / 2,048"
    assert window.status.labels["speed"].text() == "30.0 tok/s"
    assert "length limit" in window.notice.text()
    b = c.new()  # Ctrl+N: a blank conversation, with none of a's figures or notices
    assert b is not a and window.status.labels["speed"].text() == "— tok/s"
    assert window.notice.text() == ""
    c.select(a.id)
    assert window.status.labels["speed"].text() == "30.0 tok/s"
    assert "length limit" in window.notice.text()
    assert b not in c.conversations  # the blank one left behind does not pile up


def test_reopened_conversation_keeps_versions_stats_tint_and_context(qtbot, window, driver,
                                                                   smol_path, settings) -> None:
    from app.views.main_window import MainWindow

    settings.update({"autosave": False, "save_kv": True})
    driver.load(smol_path)
    driver.send("Name a fruit.")
    conv = window.controller.current
    conv.turns[-1].spans = [(0, 2)]
    driver.finish(window.chat_view.widgets[-1].regen_button.click)
    conv.turns[-1].spans = [(0, 1)]
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        window.controller.files.save()
    path = saved.args[0].path
    stats = conv.turns[-1].stats

    other = MainWindow(settings, autoload=False)
    qtbot.addWidget(other)
    try:
        with qtbot.waitSignal(other.model_loaded, timeout=LONG_MS):
            other.load_models(smol_path)
        assert other.sidebar.list.count() == 1  # the saved one; no blank "New conversation"
        with qtbot.waitSignal(other.controller.conversation_opened, timeout=LONG_MS) as opened:
            other.controller.files.open_path(path)
        assert opened.args[0].restored_kv
        again = other.controller.current
        assert again.versions(1) == (2, 2) and again.turns[-1].stats == stats
        assert again.turns[-1].spans == [(0, 1)]
        used = opened.args[0].n_past
        assert used > 0 and other.status.labels["context"].text().startswith(f"context {used:,} /")
        widget = other.chat_view.widgets[-1]
        assert "tokens" in widget.meta_label.text() and _versions(widget) == "2/2"
    finally:
        other.close()


def test_a_failed_load_keeps_the_loaded_model_and_drops_the_bad_file(qtbot, window, driver,
                                                                    smol_path,
                                                                    tmp_path: Path) -> None:
    info = driver.load(smol_path)
    bad = tmp_path / "notes.gguf"
    bad.write_text("just some text, not a model\n")
    window.models.set_choice(bad)
    window.load_models(bad)
    assert "not a GGUF model file" in window.notice.text()
    assert window.state.model is info and window.models.target() == smol_path
    for combo in (window.models.target_combo, window.models.draft_combo):
        assert combo.findData(str(bad)) < 0
    assert driver.send("Say hi.").done.stats.n_tokens > 0


def _formats(doc: QTextDocument) -> list[tuple[str, QTextCharFormat]]:
    out = []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            out += [(ch, frag.charFormat()) for ch in frag.text()]
            it += 1
        block = block.next()
    return out


def test_the_draft_mark_is_on_text_only_in_both_themes(qapp) -> None:
    from app.views.render import render
    from app.views.theme import DARK_COLORS, LIGHT_COLORS

    reply = "Code:\n\n```python\ndef f(a):\n    return a\n```\n"
    start = reply.index("    return")
    for colors in (LIGHT_COLORS, DARK_COLORS):
        doc = QTextDocument()
        render(doc, reply, colors, spans=[(start, start + len("    return a"))])
        marked = "".join(ch for ch, f in _formats(doc)
                         if f.underlineStyle() == QTextCharFormat.UnderlineStyle.DotLine)
        assert marked == "returna"  # the indentation and the space are not marked
        tinted = "".join(ch for ch, f in _formats(doc)
                         if f.background().color() == colors.draft_bg)
        assert tinted == "returna"  # the tint (WCAG AA: tests/app/test_theme.py) too


def test_user_messages_render_as_markdown_without_html(qtbot) -> None:
    from app.control.conversation import Turn
    from app.views.message_widget import MessageWidget

    w = MessageWidget(Turn("user", "Look:\n\n```python\nx = 1\n```\n\n<b>not bold</b>"))
    qtbot.addWidget(w)
    w.refresh(highlight_draft=True)
    text = w.body.document().toPlainText()
    assert "```" not in text and w.body.codes == ["x = 1"]
    assert "<b>not bold</b>" in text


def test_the_chat_says_when_older_turns_are_out_of_view(qtbot, window) -> None:
    c = window.controller
    conv = c.current
    conv.add_user("a long chat")
    conv.begin_reply()
    done = Done("stop", "ok", (1,), Stats(n_tokens=1, gen_s=0.1))
    c.on_finished(ChatReply(conv.id, done, 200, 256, dropped=4))
    assert "4 oldest messages are out of the model's view" in window.notice.text()
    conv.begin_reply(1)
    c.on_finished(ChatReply(conv.id, done, 200, 256, dropped=6,
                        shift_note="M cannot shift its cache: the 90 tokens … are recomputed"))
    assert "6 oldest" in window.notice.text() and "cannot shift" in window.notice.text()
