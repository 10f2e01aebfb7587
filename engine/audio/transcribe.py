"""Speech to text with Whisper base (the catalogue's ``whisper``, CTranslate2) through faster-whisper.

``Transcriber(folder).transcribe(audio)`` takes a file's path or its bytes and gives a
``Transcript`` (text, language, duration, segments). The audio is decoded here, not by
faster-whisper, so that what is read is bounded and every fault is one line (``AudioError``):

* any format FFmpeg reads (PyAV's own copy: WAV, FLAC, MP3, Ogg, WebM, M4A...), resampled to
  16 kHz mono; empty input, input with no audio stream, and undecodable input are refused;
* a WAV file whose header promises more sample bytes than the file holds (a recording cut off)
  is refused: FFmpeg would quietly read what is there;
* decoding stops past ``max_seconds`` of audio (a small compressed file can unpack to hours).

The model loads from its folder at the first transcription (about 2 s) and stays; faster-whisper
is given the folder itself, never a hub name, so nothing is downloaded. One transcription runs
at a time per ``Transcriber`` (a lock), each on ``threads`` CPU threads.
"""

from __future__ import annotations

import io
import logging
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from engine import paths
from engine.errors import AudioError, ModelLoadError
from engine.models.catalog import WHISPER

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

log = logging.getLogger(__name__)

RATE = 16_000  # samples a second, as Whisper reads them
MAX_SECONDS = 3600.0  # the longest audio one call decodes (230 MB of samples)
UNKNOWN_LENGTH = 0x7FFF0000  # a WAV data size from here up is a placeholder (streamed recordings)


class LanguageError(AudioError):
    """A language Whisper does not know."""


@dataclass(frozen=True)
class Segment:
    start: float  # seconds
    end: float
    text: str


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str  # ISO 639-1, as Whisper names it ("en")
    duration: float  # seconds of audio
    segments: tuple[Segment, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "language": self.language, "duration": round(self.duration, 3)}


# The packaged app leaves speech out for now (packaging/duet.spec: its libraries are ~200 MB and
# the window has no microphone yet); there, and wherever they are missing, this is the one line.
NOT_BUILT = ("speech to text is not part of this build (faster-whisper and PyAV are not "
             "installed); run Duet from a checkout set up by scripts/bootstrap.sh")

def default_folder() -> Path:
    """The catalogue's Whisper model in the models folder."""
    assert WHISPER.folder is not None
    return paths.models_dir() / WHISPER.folder


# -- reading audio --------------------------------------------------------------------------


def check_wav(f: BinaryIO, size: int) -> None:
    """If ``f`` (``size`` bytes, at its start) is a RIFF WAVE file, its ``data`` chunk must be
    all there. A size of 0 or of 2 GiB or more (0x7FFFFFFF, 0xFFFFFFFF: what a recorder writing
    to a pipe puts there, never to go back) is taken as "to the end of the file"."""
    head = f.read(12)
    f.seek(0)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return
    pos = 12
    while pos + 8 <= size:
        f.seek(pos)
        chunk_id, length = struct.unpack("<4sI", f.read(8))
        if chunk_id == b"data":
            f.seek(0)
            held = size - pos - 8
            if 0 < length < UNKNOWN_LENGTH and length > held:
                raise AudioError(f"the WAV file is truncated: its header promises {length} bytes of "
                                 f"audio, it holds {held}")
            return
        pos += 8 + length + (length & 1)  # chunks are padded to an even size
    f.seek(0)
    raise AudioError("the WAV file is truncated: it has no audio data")


def decode(source: Path | bytes, *, max_seconds: float = MAX_SECONDS) -> np.ndarray:
    """``source`` (a path or a file's bytes) as 16 kHz mono float32 samples in [-1, 1)."""
    try:
        import av  # lazy: PyAV's FFmpeg (~100 ms) only when audio is read
    except ImportError:
        raise AudioError(NOT_BUILT) from None
    try:
        f: BinaryIO = open(source, "rb") if isinstance(source, Path) else io.BytesIO(source)
    except OSError as e:
        raise AudioError(f"cannot read {e.filename}: {e.strerror or e}") from None
    with f:
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        if size == 0:
            raise AudioError("the audio is empty (0 bytes)")
        check_wav(f, size)
        limit = int(max_seconds * RATE)
        chunks: list[np.ndarray] = []
        n = 0
        try:
            with av.open(f, mode="r", metadata_errors="ignore") as container:
                if not container.streams.audio:
                    raise AudioError("the file holds no audio")
                resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
                for frame in container.decode(audio=0):
                    for out in resampler.resample(frame):
                        chunk = out.to_ndarray().reshape(-1)
                        n += len(chunk)
                        if n > limit:
                            raise AudioError(f"the audio is longer than {max_seconds:.0f} s")
                        chunks.append(chunk)
                chunks.extend(out.to_ndarray().reshape(-1) for out in resampler.resample(None))
        except (av.error.FFmpegError, ValueError, EOFError) as e:  # (PyAV's errors subclass OSError and more)
            reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
            raise AudioError(f"not audio that can be read ({reason})") from None
    samples = np.concatenate(chunks) if chunks else np.zeros(0, np.int16)
    if len(samples) == 0:
        raise AudioError("the file holds no audio samples")
    return samples.astype(np.float32) / 32768.0


# -- transcribing ---------------------------------------------------------------------------


class Transcriber:
    """Whisper from ``folder`` (default: the catalogue's, in the models folder), loaded at the
    first use."""

    def __init__(self, folder: Path | None = None, *, threads: int = 0) -> None:
        self.folder = folder if folder is not None else default_folder()
        self.threads = threads or min(os.cpu_count() or 1, 8)
        self._model: WhisperModel | None = None
        self._lock = threading.Lock()

    @property
    def installed(self) -> bool:
        return (self.folder / "model.bin").is_file()

    def _load(self) -> WhisperModel:
        if self._model is None:
            if not self.installed:
                raise ModelLoadError(f"the speech model is not installed in {self.folder}; "
                                     "run: duet-cli models fetch whisper")
            try:
                from faster_whisper import WhisperModel  # lazy: ctranslate2, tokenizers (~0.6 s)
            except ImportError:
                raise ModelLoadError(NOT_BUILT) from None

            try:
                self._model = WhisperModel(str(self.folder), device="cpu", compute_type="int8",
                                           cpu_threads=self.threads, local_files_only=True)
            except (RuntimeError, ValueError, OSError) as e:
                raise ModelLoadError(f"the speech model in {self.folder} does not load: {e}") from None
            log.info("speech model loaded from %s (%d threads)", self.folder, self.threads)
        return self._model

    def languages(self) -> list[str]:
        with self._lock:
            return list(self._load().supported_languages)

    def transcribe(self, source: Path | bytes, *, language: str | None = None, prompt: str | None = None,
                   temperature: float = 0.0) -> Transcript:
        """The words spoken in ``source``; ``language`` (ISO 639-1; None: detected), ``prompt``
        (text the speech follows, for names and spelling), ``temperature`` (0: greedy)."""
        samples = decode(source)  # before the lock: a bad file waits for nobody
        with self._lock:
            model = self._load()
            if language is not None and language not in model.supported_languages:
                raise LanguageError(f"unknown language '{language}' (give an ISO 639-1 code such as en)")
            parts, info = model.transcribe(samples, language=language, initial_prompt=prompt or None,
                                           temperature=temperature, beam_size=1,
                                           condition_on_previous_text=False)
            segments = tuple(Segment(s.start, s.end, s.text.strip()) for s in parts)  # decodes here
        text = " ".join(s.text for s in segments if s.text)
        return Transcript(text, info.language, len(samples) / RATE, segments)
