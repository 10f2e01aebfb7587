"""Whisper on real speech (the clips of tests/data/speech/, read by espeak-ng), and audio that
cannot be transcribed refused in one line before the model is asked."""

from __future__ import annotations

import io
import struct
import wave
from pathlib import Path

import pytest

from engine.audio.transcribe import MAX_SECONDS, RATE, Transcriber, check_wav, decode
from engine.errors import AudioError, ModelLoadError
from tests.speech import CLIPS, MAX_WER, reference, word_error_rate


@pytest.fixture(scope="module")
def transcriber() -> Transcriber:
    t = Transcriber()
    if not t.installed:
        pytest.fail(f"{t.folder} is missing: run ./test.sh (or duet-cli models fetch --group test)")
    return t


def test_word_error_rate() -> None:
    assert word_error_rate("The cat sat.", "the cat sat") == 0
    assert word_error_rate("the cat sat on the mat", "the cat sat on a mat") == pytest.approx(1 / 6)
    assert word_error_rate("a b c", "a c") == pytest.approx(1 / 3)  # a deletion
    assert word_error_rate("a b", "a x b y") == 1.0  # two insertions
    assert word_error_rate("It's old, but it runs.", "its old but it runs") == 0


@pytest.mark.parametrize("clip", CLIPS, ids=[c.stem for c in CLIPS])
def test_speech_is_transcribed(transcriber: Transcriber, clip: Path) -> None:
    got = transcriber.transcribe(clip)
    assert word_error_rate(reference(clip), got.text) <= MAX_WER, got.text
    assert got.language == "en"
    assert got.duration == pytest.approx(clip.stat().st_size / (2 * RATE), abs=0.1)
    assert got.segments and got.segments[-1].end <= got.duration + 0.5


def test_bytes_and_a_given_language(transcriber: Transcriber) -> None:
    clip = CLIPS[0]
    got = transcriber.transcribe(clip.read_bytes(), language="en")
    assert word_error_rate(reference(clip), got.text) <= MAX_WER
    with pytest.raises(AudioError, match="unknown language 'xx'"):
        transcriber.transcribe(clip.read_bytes(), language="xx")


def _wav(seconds: float = 0.5) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(b"\0\0" * int(seconds * RATE))
    return out.getvalue()


def test_a_silent_wav_decodes() -> None:
    assert len(decode(_wav(0.5))) == RATE // 2


@pytest.mark.parametrize(("data", "message"), [
    (b"", "empty"),
    (b"hello, this is not audio at all\n" * 50, "not audio"),
    (_wav(1.0)[:5000], "truncated"),  # a recording cut off: the header promises more
    (_wav(1.0)[:30], "truncated"),  # cut inside the header
    (b"RIFF\x24\x00\x00\x00WAVEfmt ", "truncated"),
    (b"%PDF-1.7\n" + bytes(range(256)) * 20, "not audio"),
])
def test_bad_audio_is_one_line(data: bytes, message: str) -> None:
    with pytest.raises(AudioError, match=message) as err:
        decode(data)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("placeholder", [0xFFFFFFFF, 0x7FFFFFFF])
def test_a_wav_of_unknown_length_is_read_to_its_end(placeholder: int) -> None:
    data = bytearray(_wav(0.25))
    at = data.index(b"data") + 4
    data[at:at + 4] = struct.pack("<I", placeholder)  # as a recorder writing to a pipe
    check_wav(io.BytesIO(bytes(data)), len(data))
    assert len(decode(bytes(data))) == RATE // 4


def test_too_long_audio_stops_decoding() -> None:
    with pytest.raises(AudioError, match="longer than"):
        decode(_wav(2.0), max_seconds=1.0)
    assert MAX_SECONDS >= 600


def test_a_missing_file_and_a_missing_model(tmp_path: Path) -> None:
    with pytest.raises(AudioError, match="cannot read"):
        decode(tmp_path / "nope.wav")
    with pytest.raises(ModelLoadError, match="models fetch whisper"):
        Transcriber(tmp_path).transcribe(_wav(0.5))


def test_a_build_without_speech_says_so_in_one_line(monkeypatch, tmp_path: Path) -> None:
    """The packaged app leaves faster-whisper and PyAV out (packaging/duet.spec)."""
    import sys

    monkeypatch.setitem(sys.modules, "av", None)  # import av: ImportError
    monkeypatch.setitem(sys.modules, "faster_whisper", None)
    with pytest.raises(AudioError, match="^speech to text is not part of this build") as e:
        decode(CLIPS[0])
    assert "\n" not in str(e.value)
    folder = tmp_path / "whisper"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="^speech to text is not part of this build"):
        Transcriber(folder)._load()
