"""Pictures in the window (real SmolLM2 with the seeded test projector beside it): a picture
pasted is a thumbnail above the composer; asked about, it is a thumbnail in the sent bubble
(click: shown large); the conversation saves with it and reopens with its KV state, and the
next question reads none of it again."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QDialog, QToolButton

from tests.conftest import REPLY_WAIT_S
from tests.images import picture, write_projector

LONG_MS = REPLY_WAIT_S * 1000


def _chips(widget) -> list[QToolButton]:
    return [c for c in widget.findChildren(QToolButton) if c.objectName() == "picture-chip"]


def test_paste_ask_see_save_reopen_continue(qtbot, window, driver, smol_path, settings, tmp_path) -> None:
    settings.update({"autosave": True, "save_kv": True, "state_cache_mb": 0, "max_tokens": 8})
    model = tmp_path / smol_path.name
    model.symlink_to(smol_path)
    write_projector(tmp_path / "mmproj-smollm2-135m-instruct-f16.gguf", 576)
    driver.load(model)
    assert "reads pictures through mmproj-smollm2-135m-instruct-f16.gguf" in window.composer.attach.toolTip()

    pasted = QMimeData()
    pasted.setImageData(QImage.fromData(picture(31, (120, 90))))
    with qtbot.waitSignal(window.attachments.changed, timeout=LONG_MS):
        window.composer.edit.insertFromMimeData(pasted)  # what Ctrl+V of an image does
    assert [c.text() for c in _chips(window.chips)] == ["pasted.png"] and window.chips.isVisible()

    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        with qtbot.waitSignal(window.controller.reply_finished, timeout=LONG_MS) as first:
            qtbot.keyClicks(window.composer.edit, "What is in the picture?")
            qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    conv = window.controller.current
    (image,) = conv.turns[0].images
    assert not window.chips.isVisible()  # the picture went with the message
    (sent,) = _chips(window.chat_view.widgets[0])  # the thumbnail in the sent bubble
    sent.click()
    assert any(d.objectName() == "picture-view" and d.isVisible() for d in window.findChildren(QDialog))

    path = saved.args[0].path
    window.controller.new()
    driver.send("Unrelated: name a colour.")  # another conversation takes the cache
    with qtbot.waitSignal(window.controller.conversation_opened, timeout=LONG_MS) as opened:
        window.controller.files.open_path(path)
    assert opened.args[0].restored_kv
    reopened = window.controller.current
    assert reopened.turns[0].images == (image,)  # the bytes came back from the file
    assert _chips(window.chat_view.widgets[0])
    follow = driver.send("And what colour is it?")
    asked = first.args[0].done.stats
    assert asked.n_prompt_tokens > 16  # the picture's positions were in it
    # the saved history (the picture, the question, the reply) came back from the file
    assert follow.done.stats.n_cached_tokens >= asked.n_prompt_tokens + asked.n_tokens - 2


def test_a_model_without_a_projector_says_why(qtbot, window, driver, smol_path, settings) -> None:
    """A picture sent to a model that cannot read it: one line naming the file it needs."""
    driver.load(smol_path)
    assert "cannot read pictures: it needs its vision projector" in window.composer.attach.toolTip()
    pasted = QMimeData()
    pasted.setImageData(QImage.fromData(picture(32)))
    with qtbot.waitSignal(window.attachments.changed, timeout=LONG_MS):
        window.composer.edit.insertFromMimeData(pasted)
    with qtbot.waitSignal(window.controller.request_failed, timeout=LONG_MS) as failed:
        window.controller.send("What is in the picture?", (), window.attachments.take_pictures())
    assert "cannot read images" in failed.args[0].message and "mmproj" in failed.args[0].message
