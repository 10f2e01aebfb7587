"""Files in the chat, through the real window and the real 1.5B: a file attached is a chip
(name, tokens), the message carries it, the answer uses it; after a restart of the app the same
file in a new conversation is restored from the disk KV store, not read again (the engine's
count of the prompt's cached tokens); a file that cannot be read is one line and nothing else
changes."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QToolButton

from tests.conftest import REPLY_WAIT_S, model_path

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)
FACT = "The secret code of the lighthouse is PELICAN-42."
FILLER = ("The keeper's log records the weather each morning, the state of the lamp, the ships "
          "that passed and the supplies that came with the boat. ")


def _manual(tmp_path: Path) -> Path:
    path = tmp_path / "lighthouse.md"
    path.write_text("# The lighthouse manual\n\n" + FILLER * 22 + "\n\n" + FACT + "\n\n" + FILLER * 8,
                    encoding="utf-8")
    return path


def _attach(qtbot, window, path: Path) -> None:
    with qtbot.waitSignal(window.attachments.changed, timeout=LONG_MS):
        window.attach([path])


def _ask(qtbot, window, text: str):
    with qtbot.waitSignal(window.controller.reply_finished, timeout=LONG_MS) as blocker:
        window.composer.edit.setPlainText(text)
        window.composer._submit()
    return blocker.args[0]


def test_a_file_attached_is_used_and_after_a_restart_it_is_not_read_again(
        qtbot, window, driver, settings, tmp_path) -> None:
    from app.views.main_window import MainWindow
    from tests.app.conftest import Driver, quit_without_asking

    settings.update({"max_tokens": 24, "n_ctx": 4096})
    manual = _manual(tmp_path)
    driver.load(model_path("target"))
    _attach(qtbot, window, manual)
    (chip,) = [c for c in window.chips.findChildren(QToolButton) if c.objectName() == "attachment-chip"]
    assert chip.text().startswith("lighthouse.md · ") and "tokens" in chip.text()
    reply = _ask(qtbot, window, "What is the secret code of the lighthouse? Answer with the code only.")
    assert "PELICAN-42" in reply.done.text
    first = window.controller.current
    assert first.turns[0].attachments[0].name == "lighthouse.md"  # the message carries it
    assert reply.sources == ("lighthouse.md (whole)",)
    assert "saw lighthouse.md (whole)" in window.chat_view.widgets[-1].meta_label.text()
    assert reply.done.stats.n_cached_tokens < 100  # read: nothing of it was cached
    assert not window.chips.isVisible()  # the chips went with the message
    window.close()

    again = MainWindow(settings, autoload=False)  # the next start: nothing in memory
    qtbot.addWidget(again, before_close_func=quit_without_asking)
    again.show()
    Driver(qtbot, again).load(model_path("target"))
    _attach(qtbot, again, manual)
    second = _ask(qtbot, again, "Who writes in the keeper's log?")
    n_file = len(again.client.worker.runtime.target.tokenize_text(manual.read_text()))
    assert second.done.stats.n_cached_tokens >= n_file  # restored from disk, not read again


def test_a_file_that_cannot_be_read_is_one_line(qtbot, window, tmp_path) -> None:
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    with qtbot.waitSignal(window.attachments.failed, timeout=LONG_MS) as blocker:
        window.attach([fifo])
    assert "pipe.txt" in blocker.args[0] and "\n" not in blocker.args[0]
    assert window.attachments.items == [] and not window.chips.isVisible()


def test_a_large_file_is_retrieved_and_ranked_with_the_embedding_model(
        qtbot, window, driver, settings, smol_path, tmp_path) -> None:
    """Too large for the context: passages are retrieved (BM25, then the catalog's embedding
    model, as the server's /v1/embeddings makes them), and the reply says which it saw."""
    settings.update({"max_tokens": 4, "n_ctx": 1024})
    big = tmp_path / "logbook.md"
    topics = ["the weather", "the lamp", "the boat", "the supplies", "the birds", "the fog horn"]
    big.write_text("\n\n".join(f"## Day {i}\n\n" + f"Today the keeper wrote about {topics[i % 6]}. "
                               + FILLER * 3 for i in range(60)) + "\n\n" + FACT, encoding="utf-8")
    driver.load(smol_path)
    source = window.client.worker.vectors
    assert source is not None and source.path is not None and source.path.name.startswith("all-minilm")
    _attach(qtbot, window, big)
    reply = _ask(qtbot, window, "What is the secret code of the lighthouse?")
    assert reply.sources == ("logbook.md (passages)",)
    assert source._embedder is not None  # the candidates were embedded to rank them
