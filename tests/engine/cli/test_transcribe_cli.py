"""duet-cli transcribe: the spoken clips' words within the word error rate, --json's keys, and a
file that is not audio a one-line error with exit status 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli.main import main
from tests.speech import CLIPS, MAX_WER, reference, word_error_rate


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_transcribe_json(capsys) -> None:
    for clip in CLIPS:
        code, out, _ = run(capsys, "transcribe", str(clip), "--json")
        assert code == 0
        got = json.loads(out)
        assert set(got) == {"text", "language", "duration", "segments"} and got["language"] == "en"
        assert word_error_rate(reference(clip), got["text"]) <= MAX_WER, got["text"]


def test_transcribe_prints_the_text(capsys) -> None:
    code, out, _ = run(capsys, "transcribe", "--language", "en", str(CLIPS[0]))
    assert code == 0 and out.endswith("\n") and out.count("\n") == 1
    assert word_error_rate(reference(CLIPS[0]), out) <= MAX_WER


@pytest.mark.parametrize(("content", "message"), [
    (b"", "the audio is empty"),
    (b"not audio\n" * 100, "not audio"),
    (CLIPS[0].read_bytes()[:20_000], "the WAV file is truncated"),
])
def test_bad_audio_is_one_line_and_exit_1(capsys, tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.wav"
    path.write_bytes(content)
    code, out, err = run(capsys, "transcribe", str(path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("duet-cli: error: ") and message in err


def test_threads_out_of_range(capsys) -> None:
    code, _, err = run(capsys, "transcribe", "--threads", "-1", str(CLIPS[0]))
    assert code == 1 and "--threads must be between" in err


def test_missing_file_and_missing_model(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "transcribe", str(tmp_path / "none.wav"))
    assert code == 1 and "cannot read" in err and err.count("\n") == 1
    code, _, err = run(capsys, "transcribe", "--speech-model", str(tmp_path), str(CLIPS[0]))
    assert code == 1 and "duet-cli models fetch whisper" in err and err.count("\n") == 1


def test_standard_input_through_the_real_command() -> None:
    clip = CLIPS[-1]
    done = subprocess.run([sys.executable, "-c", "from engine.cli.main import main; raise SystemExit(main())",
                           "transcribe", "-", "--language", "en"], input=clip.read_bytes(),
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert word_error_rate(reference(clip), done.stdout.decode()) <= MAX_WER
