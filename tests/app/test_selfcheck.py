"""The headless self-check, in-process, on the real SmolLM2 (the packaged app runs the same code;
tests/packaging/test_bundle.py runs it inside the Linux bundle)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from app import selfcheck
from app.selfcheck import CheckFailed, expand_steps, run_selfcheck


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_passes_on_the_test_model_with_every_step(smol_path, capsys) -> None:
    assert Path(os.environ["DUET_MODELS_DIR"]) == smol_path.parent
    assert run_selfcheck(["--self-check"]) == 0
    out, err = capsys.readouterr()
    lines = _lines(out)
    assert [line.split()[:2] for line in lines[:4]] == [
        ["model", "ok"], ["generate", "ok"], ["session", "ok"], ["qt", "ok"]]
    assert lines[-1].startswith("self-check passed in ")
    generate, session, qt = lines[1], lines[2], lines[3]
    runs = re.findall(r"(ngram|model): (\d+) tokens at \d+ tok/s, drafts (\d+) proposed", generate)
    assert [name for name, _, _ in runs] == ["ngram", "model"]
    assert all(0 < int(n) <= 24 and int(proposed) > 0 for _, n, proposed in runs)
    assert "target and draft KV restored" in session
    assert "platform offscreen" in qt
    assert "Traceback" not in out + err


def test_ngram_only_with_the_session_round_trip(capsys) -> None:
    assert run_selfcheck(["--no-draft", "--only", "session", "--max-tokens", "12"]) == 0
    out, _ = capsys.readouterr()
    assert [line.split()[0] for line in _lines(out)] == ["model", "generate", "session", "self-check"]
    assert "ngram: " in out and "model: " not in out and "with target KV restored" in out


def test_missing_test_model_is_one_line_without_traceback(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DUET_MODELS_DIR", str(tmp_path / "no-models"))
    assert run_selfcheck([]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert _lines(err) == [err.strip()]
    assert err.startswith("self-check failed: model: the test model smollm2-135m-instruct-q4_1.gguf")
    assert "--fetch" in err and "Traceback" not in err


def test_missing_model_path(tmp_path, capsys) -> None:
    assert run_selfcheck(["--model", str(tmp_path / "gone.gguf")]) == 1
    _, err = capsys.readouterr()
    assert _lines(err) == [f"self-check failed: model: model file not found: {tmp_path / 'gone.gguf'}"]


def test_not_a_gguf_file(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope" * 100)
    assert run_selfcheck(["--model", str(bad)]) == 1
    _, err = capsys.readouterr()
    assert _lines(err) == ["self-check failed: model: not a GGUF model file: bad.gguf"]


def test_unexpected_error_is_one_line_and_traceback_only_in_debug_log(monkeypatch, capsys,
                                                                      caplog) -> None:
    def boom() -> str:
        raise RuntimeError("first line\n\nthe cause")

    monkeypatch.setattr(selfcheck, "check_qt", boom)
    with caplog.at_level("DEBUG", logger="app.selfcheck"):
        assert run_selfcheck(["--only", "qt"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert _lines(err) == ["self-check failed: qt: RuntimeError: the cause"]
    assert any(r.exc_info for r in caplog.records if r.name == "app.selfcheck")


def test_qt_platform_is_forced_offscreen_then_restored(monkeypatch, capsys) -> None:
    seen = []
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setattr(selfcheck, "check_qt", lambda: seen.append(os.environ["QT_QPA_PLATFORM"]) or "x")
    assert run_selfcheck(["--only", "qt"]) == 0
    assert seen == ["offscreen"]
    assert os.environ["QT_QPA_PLATFORM"] == "xcb"


def test_steps_pull_in_what_they_need() -> None:
    assert expand_steps(["session"]) == {"model", "generate", "session"}
    assert expand_steps(["qt"]) == {"qt"}
    assert expand_steps(["generate", "qt"]) == {"model", "generate", "qt"}
    with pytest.raises(CheckFailed, match="unknown step 'gpu'"):
        expand_steps(["gpu"])


def test_unknown_step_fails_in_one_line(capsys) -> None:
    assert run_selfcheck(["--only", "model,gpu"]) == 1
    _, err = capsys.readouterr()
    assert _lines(err) == ["self-check failed: unknown step 'gpu'; steps: model, generate, session, qt"]


def test_python_m_app_runs_the_self_check_as_the_readme_says(capsys) -> None:
    from app.__main__ import main

    assert main(["--self-check", "--only", "model"]) == 0
    out, _ = capsys.readouterr()
    assert [line.split()[0] for line in _lines(out)] == ["model", "self-check"]
