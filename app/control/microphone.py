"""The microphone as an audio source for dictation (app.control.dictation.AudioSource): the
system's default input through Qt Multimedia (QMediaDevices, QAudioSource), 16 kHz mono 16-bit
where the device takes it, else the device's own rate and channels (Whisper's decoder
resamples), with float or 32-bit samples turned into 16-bit here.

Qt Multimedia is PySide6-Addons, which Duet's base install (PySide6-Essentials) lacks: without
it, as without a microphone or the permission to use it, ``start`` fails in one line.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import numpy as np
from PySide6.QtCore import QCoreApplication, QIODevice, Qt

from app.control.dictation import AudioSource

log = logging.getLogger(__name__)

NO_MULTIMEDIA = ("The microphone needs Qt Multimedia (PySide6-Addons), which this install "
                 "lacks: run scripts/bootstrap.sh voice.")
NO_DEVICE = "No microphone was found: connect one, or choose one in the system's sound settings."
DENIED = "Duet may not use the microphone: allow it in the system's privacy settings."


def to_int16(data: bytes, sample_format: str) -> bytes:
    """Samples of ``sample_format`` ("Int16", "Int32", "Float", "UInt8") as 16-bit PCM."""
    if sample_format == "Int16":
        return data
    if sample_format == "Float":
        x = np.frombuffer(data[: len(data) // 4 * 4], dtype="<f4")
        return (np.clip(x, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    if sample_format == "Int32":
        return (np.frombuffer(data[: len(data) // 4 * 4], dtype="<i4") >> 16).astype("<i2").tobytes()
    if sample_format == "UInt8":
        return ((np.frombuffer(data, dtype=np.uint8).astype(np.int16) - 128) << 8).astype("<i2").tobytes()
    raise ValueError(f"samples of format {sample_format}")


class Microphone(AudioSource):
    def __init__(self) -> None:
        super().__init__()
        self._audio: Any = None  # QAudioSource
        self._io: QIODevice | None = None
        self._sample_format = "Int16"

    def start(self) -> None:
        try:  # lazy, by name: PySide6-Addons may not be installed (nor its type stubs)
            multimedia = importlib.import_module("PySide6.QtMultimedia")
        except ImportError:
            self.failed.emit(NO_MULTIMEDIA)
            return
        permission = self._permission()
        app = QCoreApplication.instance()
        if permission is not None and app is not None:
            status = app.checkPermission(permission)
            if status == Qt.PermissionStatus.Denied:
                self.failed.emit(DENIED)
                return
            if status == Qt.PermissionStatus.Undetermined:  # (asks once: macOS, Windows)
                app.requestPermission(permission, self, lambda p: self._permitted(p, multimedia))
                return
        self._open(multimedia)

    def _permitted(self, permission: Any, multimedia: Any) -> None:
        if permission.status() == Qt.PermissionStatus.Granted:
            self._open(multimedia)
        else:
            self.failed.emit(DENIED)

    @staticmethod
    def _permission() -> Any:
        try:
            from PySide6.QtCore import QMicrophonePermission
        except ImportError:  # Qt before 6.5: no permissions API
            return None
        return QMicrophonePermission()

    def _open(self, mm: Any) -> None:
        device = mm.QMediaDevices.defaultAudioInput()
        if device.isNull():
            self.failed.emit(NO_DEVICE)
            return
        fmt = mm.QAudioFormat()
        fmt.setSampleRate(16_000)
        fmt.setChannelCount(1)
        fmt.setSampleFormat(mm.QAudioFormat.SampleFormat.Int16)
        if not device.isFormatSupported(fmt):
            fmt = device.preferredFormat()
        self.rate, self.channels = fmt.sampleRate(), fmt.channelCount()
        self._sample_format = fmt.sampleFormat().name
        if self._sample_format not in ("Int16", "Int32", "Float", "UInt8") or self.rate <= 0:
            self.failed.emit(f"The microphone's sound format is not one Duet reads "
                             f"({self._sample_format}, {self.rate} Hz).")
            return
        self._audio = mm.QAudioSource(device, fmt, self)
        self._io = self._audio.start()
        if self._io is None:
            self.failed.emit(NO_DEVICE)
            return
        self._io.readyRead.connect(self._read)
        log.info("dictating from %s (%d Hz, %d channels, %s)", device.description(), self.rate,
                 self.channels, self._sample_format)

    def _read(self) -> None:
        if self._io is not None:
            self._take(self._io)
            self._check()

    def _take(self, io: QIODevice) -> None:
        data = bytes(io.readAll().data())
        if data:
            self.chunk.emit(to_int16(data, self._sample_format))

    def _check(self) -> None:
        """A device that failed (unplugged, taken away) ends the dictation in one line. (Checked
        as sound comes: PySide cannot hand stateChanged's QAudio::State to a Python slot.)"""
        audio = self._audio
        if audio is not None and audio.error().name not in ("NoError", "UnderrunError"):
            error = audio.error().name
            self.stop()
            self.failed.emit(f"The microphone stopped ({error}).")

    def stop(self) -> None:
        audio, io = self._audio, self._io
        self._audio = self._io = None
        if io is not None:
            self._take(io)  # what the device still held
        if audio is not None:
            audio.stop()
