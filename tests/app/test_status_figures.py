"""The status bar says what is true of what is shown: no "Loading…" once loaded, the figures of
the version of a reply on screen (the real window, the real SmolLM2)."""

from __future__ import annotations

from engine.conversation.tree import Conversation
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # a safety net: as long as a test may run (tests/conftest.py)


def figures(window) -> tuple[str, ...]:
    return tuple(window.status.labels[n].text() for n in ("speed", "acceptance", "per_pass"))


def expected(stats) -> tuple[str, ...]:
    return (f"{stats.tokens_per_s:.1f} tok/s",
            f"accepted {stats.acceptance_rate:.0%}" if stats.proposed else "accepted —",
            f"{stats.tokens_per_pass:.2f} tok/pass")


def test_the_loading_line_goes_once_the_model_is_loaded(qtbot, window, driver, smol_path) -> None:
    seen: list[str] = []
    window.status.messageChanged.connect(seen.append)
    driver.load(smol_path)
    assert any(m.startswith("Loading") for m in seen)
    assert window.status.currentMessage() == ""


def test_switching_versions_shows_the_figures_of_the_version_shown(qtbot, window, driver,
                                                                   smol_path, settings) -> None:
    driver.load(smol_path)
    first = driver.send("Name a colour.")
    settings.set("max_tokens", 8)
    second = driver.finish(window.chat_view.widgets[-1].regen_button.click)
    conv = window.controller.current
    assert conv.versions(1) == (2, 2) and figures(window) == expected(second.done.stats)
    window.controller.switch(1, -1)
    assert conv.versions(1) == (1, 2) and conv.turns[1].text == first.done.text
    assert figures(window) == expected(first.done.stats)
    window.controller.switch(1, +1)
    assert figures(window) == expected(second.done.stats)


def test_the_context_fill_is_live_while_the_first_reply_streams(qtbot, window, driver, smol_path,
                                                                settings, held_replies) -> None:
    settings.set("max_tokens", 200)
    driver.load(smol_path)
    seen: list[str] = []
    with qtbot.waitSignal(window.controller.reply_finished, timeout=LONG_MS):
        window.controller.send("Write a long story about the sea.")
        # held mid-reply (tests/app/conftest.py), its text so far shown: the figure is the live one
        qtbot.waitUntil(lambda: bool(held_replies) and window.controller.current.turns[-1].text.strip()
                        == held_replies[0].strip(), timeout=LONG_MS)
        assert window.controller.generating is not None
        seen.append(window.status.labels["context"].text())
        window.controller.stop()
    assert seen[0].startswith("context ") and not seen[0].startswith("context 0 ")


def _context(window) -> tuple[int, int]:
    used, total = window.status.labels["context"].text().removeprefix("context ").split(" / ")
    return int(used.replace(",", "")), int(total.replace(",", ""))


def test_a_conversation_shown_again_shows_the_context_it_takes(qtbot, window, driver, smol_path,
                                                                settings) -> None:
    """Its figure is the engine's while it is the conversation answered; shown again after
    another was answered, after its model was loaded again, or read from its file, it is
    counted anew at once (a few tokens apart from the engine's: the reply's end of turn),
    never 0."""
    settings.update({"autosave": True, "save_kv": False})
    driver.load(smol_path)
    c = window.controller
    reply = driver.send("Name a colour.")
    first = c.current
    used = reply.n_past
    assert used > 0 and _context(window) == (used, reply.n_ctx)
    c.new()
    driver.send("Name a fruit, then tell me about it.")
    c.select(first.id)
    qtbot.waitUntil(lambda: abs(_context(window)[0] - used) <= 4, timeout=LONG_MS)
    driver.load(smol_path)  # loaded again: what the engine held is gone
    qtbot.waitUntil(lambda: abs(_context(window)[0] - used) <= 4, timeout=LONG_MS)
    assert _context(window)[1] == reply.n_ctx
    c.new()
    reopened = c.library.add(Conversation(first.title, first.path), first=False, show=False)
    c.select(reopened.id)  # its file, read as at the next start (text only: no KV state saved)
    qtbot.waitUntil(lambda: reopened.loaded and abs(_context(window)[0] - used) <= 4,
                    timeout=LONG_MS)
