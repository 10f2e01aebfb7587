"""Dictation: sound from an audio source (the microphone, app.control.microphone; a WAV file in
the tests) while the person holds or toggles the microphone button, then Whisper's transcript
of it (engine.audio.transcribe, on a thread of its own) for the composer, where the person
edits it: nothing is ever sent by itself. QtCore only.

The source hands over 16-bit PCM in chunks; the level of each chunk is passed on for the meter
(the same code path for the microphone and the file). A missing or refused microphone, a build
without speech to text, silence, or audio that cannot be read: one line each.
"""

from __future__ import annotations

import importlib.util
import io
import logging
import wave
from collections.abc import Callable

import numpy as np
from PySide6.QtCore import QObject, Signal

from app.control.background import Background, JobFailed, Report
from engine.audio.transcribe import NOT_BUILT, Transcriber
from engine.errors import DuetError

log = logging.getLogger(__name__)

MAX_SECONDS = 300.0  # a dictation stops by itself after this long (5 min: a long message)
FULL_SCALE = 0.3  # an RMS level of this (of 1.0) fills the meter: speech at a normal distance
NOTHING_HEARD = "Nothing was heard: speak after pressing the microphone button."


class AudioSource(QObject):
    """Where dictated sound comes from: ``chunk(bytes)`` of 16-bit PCM, ``channels`` interleaved
    at ``rate`` Hz, between ``start()`` and ``stop()``; ``failed(line)`` when it cannot (then it
    has stopped)."""

    chunk = Signal(bytes)
    failed = Signal(str)
    rate = 16_000
    channels = 1

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


def level(pcm: bytes) -> float:
    """How loud a chunk of 16-bit PCM is, 0 to 1 on the meter's scale."""
    samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2")
    if not len(samples):
        return 0.0
    rms = float(np.sqrt(np.mean((samples.astype(np.float32) / 32768.0) ** 2)))
    return min(rms / FULL_SCALE, 1.0)


def to_wav(pcm: bytes, rate: int, channels: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return out.getvalue()


def speech_built() -> bool:
    """Whether this build has speech to text (faster-whisper and PyAV)."""
    return all(importlib.util.find_spec(m) is not None for m in ("faster_whisper", "av"))


class Dictation(QObject):
    """``start``/``stop`` (or ``toggle``) a dictation from ``make_source()``; ``transcript(text)``
    at its end. ``state``: "idle", "listening" or "transcribing"."""

    state_changed = Signal(str)
    level = Signal(float)  # the last chunk's loudness, 0 to 1
    transcript = Signal(str)  # the words heard, for the composer
    failed = Signal(str)  # one line

    def __init__(self, make_source: Callable[[], AudioSource],
                 transcriber: Transcriber | None = None, parent: QObject | None = None, *,
                 language: Callable[[], str] = lambda: "") -> None:
        """``language()``: the language spoken, an ISO 639-1 code ("": detected each time)."""
        super().__init__(parent)
        self.make_source, self.language = make_source, language
        self.transcriber = transcriber or Transcriber()
        self.state = "idle"
        self._source: AudioSource | None = None
        self._pcm = bytearray()
        self._format = (AudioSource.rate, AudioSource.channels)
        self.job = Background("transcription", self)
        self.job.done.connect(self._on_done)

    def toggle(self) -> None:
        if self.state == "idle":
            self.start()
        elif self.state == "listening":
            self.stop()

    def start(self) -> None:
        if self.state != "idle":
            return
        if not speech_built():
            self.failed.emit(NOT_BUILT[0].upper() + NOT_BUILT[1:] + ".")
            return
        source = self.make_source()
        self._source, self._pcm = source, bytearray()
        self._format = (source.rate, source.channels)
        source.chunk.connect(self._on_chunk)
        source.failed.connect(self._on_source_failed)
        self._set_state("listening")
        source.start()

    def stop(self) -> None:
        """Stop listening and transcribe what was heard."""
        source = self._source
        if self.state != "listening" or source is None:
            return
        source.stop()
        self._drop_source()
        rate, channels = self._format
        if len(self._pcm) < rate * channels * 2 // 4:  # under a quarter of a second
            self._set_state("idle")
            self.failed.emit(NOTHING_HEARD)
            return
        wav = to_wav(bytes(self._pcm), rate, channels)
        language = self.language().strip().lower() or None
        self._pcm = bytearray()
        self._set_state("transcribing")

        def job(_report: Report) -> str | JobFailed:
            try:
                return self.transcriber.transcribe(wav, language=language).text.strip()
            except DuetError as e:  # AudioError, ModelLoadError: one line
                return JobFailed(f"Cannot transcribe: {e}")

        self.job.start(job)

    def close(self) -> None:
        if self._source is not None:
            self._source.stop()
            self._drop_source()
        self.job.close()

    def _on_chunk(self, data: bytes) -> None:
        if self.state != "listening":
            return
        self._pcm += data
        self.level.emit(level(data))
        rate, channels = self._format
        if len(self._pcm) >= MAX_SECONDS * rate * channels * 2:
            self.stop()

    def _on_source_failed(self, line: str) -> None:
        self._drop_source()
        self._pcm = bytearray()
        self._set_state("idle")
        self.failed.emit(line)

    def _on_done(self, result: object) -> None:
        self._set_state("idle")
        if isinstance(result, JobFailed):
            self.failed.emit(result.line)
        elif isinstance(result, str) and result:
            self.transcript.emit(result)
        else:
            self.failed.emit(NOTHING_HEARD)

    def _drop_source(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            source.chunk.disconnect(self._on_chunk)
            source.failed.disconnect(self._on_source_failed)
            source.deleteLater()

    def _set_state(self, state: str) -> None:
        self.state = state
        self.state_changed.emit(state)
        if state != "listening":
            self.level.emit(0.0)
