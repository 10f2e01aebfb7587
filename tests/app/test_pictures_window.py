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

    pasted = QMimeData()
    pasted.setImageData(QImage.fromData(picture(31, (120, 90))))
    with qtbot.waitSignal(window.attachments.changed, timeout=LONG_MS):
        window.composer.edit.insertFromMimeData(pasted)  # what Ctrl+V of an image does
    assert [c.text() for c in _chips(window.chips)] == ["pasted.png"] and window.chips.isVisible()

    with qtbot.waitSignal(window.controller.conversation_saved, timeout=LONG_MS) as saved:
        with qtbot.waitSignal(window.controller.reply_finished, timeout=LONG_MS):
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
    history = len(window.client.worker.runtime.ctx.tokens) - follow.done.stats.n_tokens
    assert follow.done.stats.n_cached_tokens >= history - 16  # the picture was not read again
