"""Dictation in the window, from a WAV file of real speech (espeak-ng) fed through the same
audio-source seam the microphone uses: the transcript lands in the composer at the cursor,
editable, goes through the typed-prompt path (read ahead), and is never sent by itself; click to
toggle and hold to talk; a missing microphone, a build without speech and silence are one line."""

from __future__ import annotations

import wave
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QProgressBar, QToolButton

from app.control import dictation as dictation_module
from app.control.dictation import NOTHING_HEARD, AudioSource, level
from app.control.microphone import NO_DEVICE, to_int16
from tests.conftest import REPLY_WAIT_S
from tests.speech import CLIPS, MAX_WER, reference, word_error_rate

LONG_MS = REPLY_WAIT_S * 1000  # model work: as long as a test may run (tests/conftest.py)
CHUNK_FRAMES = 1600  # 0.1 s at 16 kHz, as a microphone hands them over


class WavSource(AudioSource):
    """A WAV file as the microphone: its frames in 0.1 s chunks once started."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        with wave.open(str(path)) as w:
            self.rate, self.channels = w.getframerate(), w.getnchannels()
            self.frames = w.readframes(w.getnframes())
        self.stopped = False

    def start(self) -> None:
        step = CHUNK_FRAMES * 2 * self.channels
        for i in range(0, len(self.frames), step):
            self.chunk.emit(self.frames[i:i + step])

    def stop(self) -> None:
        self.stopped = True


class Silent(AudioSource):
    def start(self) -> None:
        self.chunk.emit(bytes(320))  # 10 ms

    def stop(self) -> None:
        pass


class Missing(AudioSource):
    def start(self) -> None:
        self.failed.emit(NO_DEVICE)

    def stop(self) -> None:
        pass


class Typed:
    """The chat the composer hands the message to: records what is read ahead and sent."""

    def __init__(self, chat) -> None:
        self.chat, self.typed, self.sent = chat, [], []

    def typing(self, text, attachments=(), pictures=()) -> None:
        self.typed.append(text)
        self.chat.typing(text, attachments, pictures)

    def send(self, text, attachments=(), pictures=()) -> None:
        self.sent.append(text)
        self.chat.send(text, attachments, pictures)


@pytest.fixture
def mic(window):
    return window.findChild(QToolButton, "mic")


def test_a_click_listens_the_next_transcribes_into_the_composer(qtbot, window, mic):
    clip = CLIPS[-1]  # weather
    sources: list[WavSource] = []
    window.dictation.make_source = lambda: sources.append(WavSource(clip)) or sources[-1]
    typed = window.composing.chat = Typed(window.composing.chat)
    edit = window.composer.edit
    qtbot.keyClicks(edit, "Note:")
    meter = window.findChild(QProgressBar, "micLevel")
    shown: list[int] = []
    window.dictation.level.connect(lambda _v: shown.append(meter.value()))
    qtbot.mouseClick(mic, Qt.MouseButton.LeftButton)
    assert window.dictation.state == "listening" and mic.text() == "Stop"
    assert meter.isVisible() and max(shown) > 20  # the sound came in (speech, not silence)
    with qtbot.waitSignal(window.dictation.transcript, timeout=LONG_MS) as heard:
        qtbot.mouseClick(mic, Qt.MouseButton.LeftButton)
        assert window.dictation.state == "transcribing" and not mic.isEnabled()
    assert sources[0].stopped and window.dictation.state == "idle" and mic.isEnabled()
    text = edit.toPlainText()
    assert text == "Note: " + heard.args[0]
    assert word_error_rate(reference(clip), heard.args[0]) <= MAX_WER, heard.args[0]
    assert not edit.isReadOnly() and not meter.isVisible()
    # never sent by itself; read ahead as typed text is (the next hand-over has it all)
    qtbot.waitUntil(lambda: bool(typed.typed) and typed.typed[-1] == text, timeout=LONG_MS)
    assert typed.sent == [] and window.controller.current.turns == []
    assert window.controller.generating is None


def test_holding_the_button_is_push_to_talk(qtbot, window, mic, settings):
    settings.set("dictation_language", "en")  # (given: no detection)
    window.dictation.make_source = lambda: WavSource(CLIPS[0])
    clock = [100.0]
    holder = mic.parent()
    holder.clock = lambda: clock[0]
    qtbot.mousePress(mic, Qt.MouseButton.LeftButton)
    assert window.dictation.state == "listening"
    clock[0] += 2.0  # held two seconds
    with qtbot.waitSignal(window.dictation.transcript, timeout=LONG_MS) as heard:
        qtbot.mouseRelease(mic, Qt.MouseButton.LeftButton)
    assert word_error_rate(reference(CLIPS[0]), heard.args[0]) <= MAX_WER
    assert window.composer.edit.toPlainText() == heard.args[0]


def test_an_unknown_language_is_one_line(qtbot, window, mic, settings):
    settings.set("dictation_language", "xx")
    window.dictation.make_source = lambda: WavSource(CLIPS[0])
    with qtbot.waitSignal(window.dictation.failed, timeout=LONG_MS):
        qtbot.mouseClick(mic, Qt.MouseButton.LeftButton)
        qtbot.mouseClick(mic, Qt.MouseButton.LeftButton)
    assert window.notice.text() == ("Cannot transcribe: unknown language 'xx' (give an ISO "
                                    "639-1 code such as en)")
    assert window.composer.edit.toPlainText() == "" and window.dictation.state == "idle"


def test_a_missing_microphone_is_one_line(qtbot, window, mic):
    window.dictation.make_source = Missing
    qtbot.mouseClick(mic, Qt.MouseButton.LeftButton)
    assert window.dictation.state == "idle" and mic.text() == "Speak"
    assert window.notice.text() == NO_DEVICE and window.notice.kind == "error"


def test_silence_and_a_build_without_speech(qtbot, window, mic, monkeypatch):
    window.dictation.make_source = Silent
    qtbot.mouseClick(mic, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(mic, Qt.MouseButton.LeftButton)
    assert window.notice.text() == NOTHING_HEARD and window.dictation.state == "idle"
    monkeypatch.setattr(dictation_module, "speech_built", lambda: False)
    qtbot.mouseClick(mic, Qt.MouseButton.LeftButton)
    assert window.dictation.state == "idle"
    assert window.notice.text().startswith("Speech to text is not part of this build")
    assert "\n" not in window.notice.text() and window.composer.edit.toPlainText() == ""


def test_levels_and_sample_formats():
    import numpy as np

    assert level(bytes(3200)) == 0.0
    loud = (np.sin(np.arange(1600) / 5) * 32000).astype("<i2").tobytes()
    assert level(loud) == 1.0
    floats = np.array([0.0, 0.5, -1.0, 2.0], dtype="<f4").tobytes()
    assert np.frombuffer(to_int16(floats, "Float"), "<i2").tolist() == [0, 16383, -32767, 32767]
    assert to_int16(b"\x01\x02", "Int16") == b"\x01\x02"


def test_the_microphone_without_qt_multimedia_says_so(qtbot, monkeypatch):
    """PySide6-Essentials alone (Duet's base install) has no Qt Multimedia: one line."""
    import sys

    from app.control.microphone import NO_MULTIMEDIA, Microphone

    monkeypatch.setitem(sys.modules, "PySide6.QtMultimedia", None)
    source = Microphone()
    with qtbot.waitSignal(source.failed, timeout=LONG_MS) as failed:
        source.start()
    assert failed.args == [NO_MULTIMEDIA]
