"""Reading while the person types (engine.runtime.ahead through the window): text typed with Qt
key events is read into the cache before Enter, the status bar says how much, the reply then
reads only the last words and is the reply read at send; with the setting off nothing is read."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000
PASTE = "\n".join(f"def f{i}(x):\n    return x * {i} + {i * i}" for i in range(30))
QUESTION = "Which of these functions returns 59 for x equal to 2? Name it."


def type_message(qtbot, window) -> None:
    edit = window.composer.edit
    edit.insertPlainText(PASTE + "\n\n")  # pasted
    qtbot.keyClicks(edit, QUESTION)  # typed, key by key


def test_typing_is_read_before_enter_and_the_reply_reads_only_the_rest(qtbot, window, driver,
                                                                        smol_path) -> None:
    driver.load(smol_path)
    type_message(qtbot, window)
    label = window.status.labels["ahead"]
    # the prompt that sending now would make, all of it (the paste too)
    qtbot.waitUntil(lambda: window.state.typed_ahead is not None and
                    window.state.typed_ahead[0] == window.state.typed_ahead[1], timeout=LONG_MS)
    held = window.state.typed_ahead[0]
    assert held > 500
    assert label.isVisibleTo(window) and label.text() == f"read ahead: {held:,} tokens"
    reply = driver.finish(lambda: qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return))
    stats = reply.done.stats
    # at send only its last token is decoded again (its logits give the first token)
    assert stats.n_prompt_tokens == held and stats.n_cached_tokens == held - 1
    qtbot.waitUntil(lambda: not label.isVisibleTo(window), timeout=LONG_MS)  # sent: gone

    # the same message read at send (reading ahead off), in a new conversation: the same reply
    window.settings.set("read_ahead", False)
    window.controller.new()
    type_message(qtbot, window)
    again = driver.finish(lambda: qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return))
    assert again.done.token_ids == reply.done.token_ids
    assert window.state.typed_ahead is None


def test_with_the_setting_off_nothing_is_read_before_enter(qtbot, window, driver, smol_path,
                                                           settings, monkeypatch) -> None:
    settings.set("read_ahead", False)
    driver.load(smol_path)
    asked: list = []
    real = window.client.read_typing
    monkeypatch.setattr(window.client, "read_typing",
                        lambda cid, messages, *a: (asked.append(messages), real(cid, messages, *a)))
    type_message(qtbot, window)
    qtbot.waitUntil(lambda: bool(asked), timeout=LONG_MS)  # the typing was handed over...
    assert asked and all(m is None for m in asked)  # ...as "read nothing"
    reply = driver.finish(lambda: qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return))
    assert reply.done.stats.n_cached_tokens == 0 and window.state.typed_ahead is None
    assert not window.status.labels["ahead"].isVisibleTo(window)


def test_typed_prompts_queued_behind_a_newer_one_or_the_message_are_not_prepared(
        window, driver, smol_path, monkeypatch) -> None:
    """Preparing a typed prompt can take seconds (passages retrieved): while the engine's
    thread prepares one, those typed after it queue up, and only the newest is prepared; the
    message sent skips them all, so Enter never waits behind the typing."""
    import threading

    from app.engine_link import worker_parts as worker_module

    driver.load(smol_path)
    prepared: list[tuple[str, bool]] = []
    first_held, release = threading.Event(), threading.Event()
    real = worker_module.prepare

    def held_prepare(model, chat, policy, *cancel):
        prepared.append((chat.messages[-1].content, any(c is not None for c in cancel)))
        if len(prepared) == 1:
            first_held.set()
            assert release.wait(REPLY_WAIT_S)
        return real(model, chat, policy, *cancel)

    monkeypatch.setattr(worker_module, "prepare", held_prepare)
    window.controller.typing("Name")
    assert first_held.wait(REPLY_WAIT_S)  # the engine's thread prepares "Name"
    for text in ("Name a", "Name a river"):
        window.controller.typing(text)
    window.controller.typing("Name a river.")
    reply = driver.finish(lambda: (window.controller.send("Name a river."), release.set()))
    assert reply.done.reason in ("stop", "length")
    assert prepared == [("Name", False), ("Name a river.", True)]  # the message's own: with a cancel


def test_a_prompt_typed_while_the_engine_serves_a_request_is_prepared_after_it(
        qtbot, window, driver, smol_path, monkeypatch) -> None:
    """Nothing is read while the engine serves a request (the local server's), and preparing
    the typed prompt then only slows that request: it waits, then is prepared and read."""
    from app.engine_link import worker_parts as worker_module
    from engine.runtime.service import Engine

    driver.load(smol_path)
    serving = [True]
    monkeypatch.setattr(Engine, "busy", property(lambda self: serving[0]))
    prepared: list[str] = []
    real = worker_module.prepare
    monkeypatch.setattr(worker_module, "prepare", lambda model, chat, *a: (
        prepared.append(chat.messages[-1].content), real(model, chat, *a))[1])
    worker = window.client.worker
    window.controller.typing("Name a river.")
    qtbot.waitUntil(lambda: worker.typing_deferred is not None or bool(prepared), timeout=LONG_MS)
    assert prepared == []
    serving[0] = False
    qtbot.waitUntil(lambda: window.state.typed_ahead is not None and
                    window.state.typed_ahead[0] == window.state.typed_ahead[1], timeout=LONG_MS)
    assert prepared == ["Name a river."] and worker.typing_deferred is None


def test_a_key_typed_is_handed_over_at_once_and_the_next_ones_at_the_intervals_end(
        qtbot, window, driver, smol_path, monkeypatch) -> None:
    """The engine starts reading the last word as it is typed (Enter often follows within a
    key's time): the first change is handed over with no wait, later ones within the interval
    together at its end."""
    driver.load(smol_path)
    texts: list[str] = []
    monkeypatch.setattr(window.controller, "typing", lambda text, *a: texts.append(text))
    qtbot.waitUntil(lambda: not window.composing.timer.isActive(), timeout=LONG_MS)
    texts.clear()
    qtbot.keyClicks(window.composer.edit, "N")
    assert texts == ["N"]  # at once, before any timer
    qtbot.keyClicks(window.composer.edit, "ame")
    qtbot.waitUntil(lambda: texts[-1] == "Name", timeout=LONG_MS)
    assert texts == ["N", "Name"]  # the keys within the interval: handed over once, together
