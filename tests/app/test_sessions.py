"""Saving and reopening conversations from the window (real SmolLM2, engine session store)."""

from __future__ import annotations

from pathlib import Path

from app.__main__ import create_window, parse_args
from engine import paths
from tests.conftest import REPLY_WAIT_S

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)


def _autosaved(qtbot, window, driver, text: str):
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        reply = driver.send(text)
    return reply, saved.args[0]


def test_autosave_then_reopen_restores_the_kv_state(qtbot, window, driver, smol_path,
                                                   settings) -> None:
    settings.update({"autosave": True, "save_kv": True, "state_cache_mb": 0})  # only the file
    driver.load(smol_path)
    first, saved = _autosaved(qtbot, window, driver, "Tell me one fact about owls.")
    path = saved.path
    assert saved.with_kv and path.parent == paths.conversations_dir() and path.suffix == ".duet"
    assert path.stem.startswith("Tell me one fact")
    assert window.recent.items[0] == path.resolve()
    window.recent_menu.aboutToShow.emit()  # File > Open recent lists it
    assert [a.text() for a in window.recent_menu.actions()] == [str(path.resolve())]
    original = window.controller.current
    assert original.path == path and not original.dirty

    # another conversation takes the cache; going back restores the saved KV state
    window.controller.new()
    _autosaved(qtbot, window, driver, "Unrelated: name a colour.")
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS) as opened:
        window.controller.files.open_path(path)
    res = opened.args[0]
    assert res.restored_kv and res.note is None
    assert "KV state" in window.status.currentMessage()
    conv = window.controller.current
    assert conv is original  # the listed conversation is reused, not duplicated
    assert [t.role for t in conv.turns] == ["user", "assistant"]
    assert conv.turns[1].text == first.done.text
    assert [w.turn for w in window.chat_view.widgets] == conv.turns

    follow, _ = _autosaved(qtbot, window, driver, "And another one?")
    stats = follow.done.stats
    # the saved history (prompt and reply) came back from the file, not from a prefill
    assert stats.n_cached_tokens >= first.done.stats.n_prompt_tokens + first.done.stats.n_tokens - 2


def test_going_back_takes_the_state_the_engine_holds_else_the_files(qtbot, window, driver,
                                                                    smol_path, settings) -> None:
    settings.update({"autosave": True, "save_kv": True})  # the engine's state cache on
    driver.load(smol_path)
    notes = "Owls hunt at night; their soft feathers make their flight silent. " * 4
    first, saved = _autosaved(qtbot, window, driver, f"{notes}Tell me one fact about owls.")
    owls = window.controller.current
    window.controller.new()
    _autosaved(qtbot, window, driver, "Unrelated: name a colour.")
    colour = window.controller.current
    # the engine kept the owls' state when the colour took sequence 0: the file's is not read
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS) as opened:
        window.controller.select(owls.id)
    assert not opened.args[0].restored_kv and opened.args[0].note is None
    follow, _ = _autosaved(qtbot, window, driver, "And another one?")
    done = first.done.stats
    assert follow.done.stats.n_cached_tokens >= done.n_prompt_tokens + done.n_tokens - 2
    # a new load holds nothing: going back restores the colour's state from its file
    driver.load(smol_path)
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS) as opened:
        window.controller.select(colour.id)
    assert opened.args[0].restored_kv


def test_reopen_falls_back_to_text_and_says_so(qtbot, window, driver, smol_path, settings) -> None:
    from app.views.main_window import MainWindow

    driver.load(smol_path)
    driver.send("Say one word.")
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        window.controller.files.save()
    path = saved.args[0].path
    settings.set("n_ctx", 1024)  # another cache layout: the saved KV state cannot fit
    assert "next model load" in window.notice.text()
    # as after a restart: a new window, the model loaded with the new context size
    other = MainWindow(settings, autoload=False)
    qtbot.addWidget(other)
    other.show()
    try:
        other_driver = type(driver)(qtbot, other)
        other_driver.load(smol_path)
        with qtbot.waitSignal(other.controller.conversation_opened, timeout=LONG_MS) as opened:
            other.controller.files.open_path(path)
        res = opened.args[0]
        assert not res.restored_kv and "context size" in res.note
        assert "from its text" in other.notice.text() and res.note in other.notice.text()
        assert [t.text for t in other.controller.current.turns][0] == "Say one word."
        reply = other_driver.send("One more word.")
        assert reply.done.stats.n_cached_tokens == 0 and reply.done.stats.n_tokens > 0
    finally:
        other.close()


def test_save_without_kv_and_rename_and_delete(qtbot, window, driver, smol_path, settings) -> None:
    settings.set("save_kv", False)
    driver.load(smol_path)
    driver.send("Hello there.")
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        window.controller.files.save()
    assert not saved.args[0].with_kv
    conv = window.controller.current
    old = conv.path
    window.controller.files.rename(conv.id, "Greetings / test")
    assert conv.path.name == "Greetings test.duet" and conv.path.exists() and not old.exists()
    assert window.sidebar.list.current_text() == "Greetings test"
    window.controller.files.delete(conv.id)
    assert not conv.path.exists() and conv not in window.controller.conversations
    assert window.controller.current is not None  # something is shown


def test_corrupt_file_shows_a_message_and_the_app_keeps_working(qtbot, window, driver, smol_path,
                                                               tmp_path: Path) -> None:
    junk = tmp_path / "junk.duet"
    junk.write_bytes(b"DUETSESS" + b"\xff" * 100)
    driver.load(smol_path)
    with qtbot.waitSignal(window.controller.request_failed, timeout=LONG_MS):
        window.controller.files.open_path(junk)
    assert "Could not open the conversation" in window.notice.text()
    assert all(c.path != junk.resolve() for c in window.controller.conversations)
    assert driver.send("Still there?").done.stats.n_tokens > 0


def test_command_line_file_opens_the_conversation(qtbot, window, driver, smol_path) -> None:
    driver.load(smol_path)
    driver.send("Name a planet.")
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        window.controller.files.save()
    path = saved.args[0].path
    args = parse_args([str(path), "--no-autoload"])
    assert args.file == path and args.no_autoload
    other = create_window(args)
    qtbot.addWidget(other)
    try:
        with qtbot.waitSignal(other.controller.conversation_opened, timeout=LONG_MS) as opened:
            pass  # create_window already asked the worker to open it
        res = opened.args[0]
        assert not res.restored_kv and res.model_path == smol_path.absolute()  # no model loaded
        assert other.controller.current.path == path.resolve()
        assert other.controller.current.turns[0].text == "Name a planet."
        assert "Load it" in other.notice.action.text()  # offers the conversation's model
    finally:
        other.close()


def test_save_as_makes_a_copy_and_the_original_stays_listed(qtbot, window, driver, smol_path,
                                                           tmp_path) -> None:
    driver.load(smol_path)
    driver.send("Say one word.")
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        window.controller.files.save()
    original = saved.args[0].path
    conv = window.controller.current
    copy = tmp_path / "copy.duet"
    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS):
        window.controller.files.save(conv, copy)  # what File > Save as… does with the chosen name
    assert window.controller.current is conv and conv.path == copy and conv.title == "copy"
    assert original.exists() and copy.exists()
    listed = [c for c in window.controller.conversations if c.path == original]
    assert len(listed) == 1 and listed[0] is not conv and listed[0].title == original.stem
    # opened, the original holds what it held
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS):
        window.controller.select(listed[0].id)
    assert [t.text for t in listed[0].turns] == [t.text for t in conv.turns]
