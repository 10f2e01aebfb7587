"""The message being written, without a window (app.control.composing, app.control.drops,
app.control.quitting): the typing throttle, a send held by a file still being read, where a
dropped file goes, what quitting would interrupt. MainWindow only wires them."""

from __future__ import annotations

from pathlib import Path

from app.control.composing import STILL_READING, Composing
from app.control.drops import Dropped, sort_drop
from app.control.quitting import unfinished
from engine.chat.messages import Attachment

NOTE = Attachment("notes.txt", "text", "0" * 64, "hello")


class FakeChat:
    def __init__(self) -> None:
        self.typed: list[tuple[str, tuple[Attachment, ...]]] = []
        self.sent: list[tuple[str, tuple[Attachment, ...]]] = []

    def typing(self, text: str, attachments: tuple[Attachment, ...] = (), pictures: tuple = ()) -> None:
        self.typed.append((text, attachments))

    def send(self, text: str, attachments: tuple[Attachment, ...] = (), pictures: tuple = ()) -> None:
        self.sent.append((text, attachments))


class FakeFiles:
    def __init__(self) -> None:
        self.pending = 0
        self.items: list[Attachment] = []

    def current(self) -> tuple[Attachment, ...]:
        return tuple(self.items)

    def take_all(self) -> tuple[Attachment, ...]:
        out, self.items = tuple(self.items), []
        return out

    def current_pictures(self) -> tuple:
        return ()

    def take_pictures(self) -> tuple:
        return ()


def _composing(qtbot, text: list[str]):
    chat, files, refused = FakeChat(), FakeFiles(), []
    composing = Composing(chat, files, lambda: text[0], lambda t, line: refused.append((t, line)))
    return composing, chat, files, refused


def test_a_key_is_handed_over_at_once_and_the_next_ones_together_at_the_intervals_end(qtbot):
    text = ["N"]
    composing, chat, files, _ = _composing(qtbot, text)
    composing.keyed()
    assert chat.typed == [("N", ())]  # at once, no timer waited for
    for typed in ("Na", "Nam", "Name"):
        text[0] = typed
        composing.keyed()
    assert len(chat.typed) == 1  # within the interval: held
    qtbot.waitUntil(lambda: len(chat.typed) == 2)
    assert chat.typed[-1] == ("Name", ())  # the text as it is at the interval's end, once
    qtbot.waitUntil(lambda: not composing.timer.isActive())
    assert len(chat.typed) == 2  # nothing changed since: nothing more


def test_other_changes_wait_for_the_interval_and_a_file_being_read_holds_them(qtbot):
    text = ["Read this"]
    composing, chat, files, _ = _composing(qtbot, text)
    files.pending = 1
    composing.changed()
    assert chat.typed == []  # not at once
    qtbot.waitUntil(lambda: not composing.timer.isActive())
    assert chat.typed == []  # a file is still being read: its end hands the prompt over
    files.pending, files.items = 0, [NOTE]
    composing.changed()
    qtbot.waitUntil(lambda: chat.typed == [("Read this", (NOTE,))])


def test_a_send_waits_for_a_file_being_read_and_then_takes_the_files(qtbot):
    composing, chat, files, refused = _composing(qtbot, [""])
    files.pending = 1
    composing.send("What does it say?")
    assert chat.sent == [] and refused == [("What does it say?", STILL_READING)]
    files.pending, files.items = 0, [NOTE]
    composing.send("What does it say?")
    assert chat.sent == [("What does it say?", (NOTE,))] and files.items == []


def test_a_drop_sorts_conversations_the_first_model_and_files_to_attach():
    dropped = sort_drop([Path("/a/chat.duet"), Path("/m/one.GGUF"), Path("/d/garden.txt"),
                         Path("/m/two.gguf"), Path("/d/manual.pdf")])
    assert dropped == Dropped((Path("/a/chat.duet"),), Path("/m/one.GGUF"),
                              (Path("/d/garden.txt"), Path("/d/manual.pdf")))
    assert sort_drop([]) == Dropped()


def test_quitting_names_what_it_would_interrupt():
    assert unfinished(False, "  \n") is None
    assert unfinished(True, "") == "A reply is being written: it stops here."
    assert "unsent message is kept" in (unfinished(False, "half a thought") or "")


def test_the_window_holds_no_decisions():
    """MainWindow builds, lays out and wires (the throttle, drops and quitting are
    app.control's): it stays a short file."""
    window = Path(__file__).resolve().parents[2] / "app" / "views" / "main_window.py"
    assert len(window.read_text(encoding="utf-8").splitlines()) <= 300
