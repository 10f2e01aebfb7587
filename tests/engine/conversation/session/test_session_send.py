"""``duet-cli generate --session``: the message is on disk before the model loads, so a process
killed while it loads (minutes on a busy machine) keeps it; a model that cannot load leaves the
file as it was. The load is replaced by one that looks at the file and then "dies" (a
BaseException nothing catches), which is where a SIGKILL would end the process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine.runtime.runtime
from engine.cli.main import main
from engine.conversation.session import read_meta
from engine.conversation.session.format import read_session


class Killed(BaseException):
    """The process ends here, as with SIGKILL: nothing runs after it."""


def _generate(path: Path, model: Path, prompt: str, *extra: str) -> list[str]:
    return ["generate", "--model", str(model), "--temperature", "0", "--max-tokens", "6",
            "--ctx", "1024", "--threads", "1", "--session", str(path), *extra, prompt]


def _killed_while_loading(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[list[str]]:
    """Loading the model records the texts in ``path`` and ends the process."""
    seen: list[list[str]] = []

    def load(*_args: object, **_kwargs: object) -> None:
        seen.append([m.content for m in read_meta(path).messages] if path.exists() else [])
        raise Killed

    monkeypatch.setattr(engine.runtime.runtime, "Runtime", load)
    return seen


def test_a_new_conversation_is_on_disk_before_the_model_loads(monkeypatch, smol_path, tmp_path):
    path = tmp_path / "new.duet"
    seen = _killed_while_loading(monkeypatch, path)
    with pytest.raises(Killed):
        main(_generate(path, smol_path, "Name a colour.", "--system", "Be brief."))
    assert seen == [["Be brief.", "Name a colour.", ""]]  # the reply begun, still empty
    assert read_meta(path).target.path == str(smol_path.absolute())


def test_a_continued_conversation_keeps_its_kv_state_and_the_new_message(
        monkeypatch, smol, smol_path, tmp_path, capsys):
    path = tmp_path / "chat.duet"
    assert main(_generate(path, smol_path, "Name a colour.")) == 0
    first = [m.content for m in read_meta(path).messages]
    with monkeypatch.context() as m:
        seen = _killed_while_loading(m, path)
        with pytest.raises(Killed):
            main(_generate(path, smol_path, "And a fruit?"))
    assert seen == [[*first, "And a fruit?", ""]]
    assert "kv.target" in read_session(path).sections  # kept for the restore after the load
    # the same command again opens it, the KV state restored, and answers the message once:
    # the reply that never began is dropped, the message is not written twice
    capsys.readouterr()
    assert main(_generate(path, smol_path, "And a fruit?", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["session"]["restored_kv"] and out["session"]["note"] is None
    assert [m.content for m in read_meta(path).messages] == [*first, "And a fruit?", out["text"]]
    # once answered, the same words are a new message
    assert main(_generate(path, smol_path, "And a fruit?", "--json")) == 0
    again = json.loads(capsys.readouterr().out)["text"]
    assert [m.content for m in read_meta(path).messages] == \
        [*first, "And a fruit?", out["text"], "And a fruit?", again]


def test_another_message_after_a_killed_load_keeps_the_one_before(monkeypatch, smol_path, tmp_path):
    path = tmp_path / "chat.duet"
    with monkeypatch.context() as m:
        _killed_while_loading(m, path)
        with pytest.raises(Killed):
            main(_generate(path, smol_path, "Name a colour."))
    assert main(_generate(path, smol_path, "Name a fruit.")) == 0
    texts = [m.content for m in read_meta(path).messages]
    assert texts[:3] == ["Name a colour.", "", "Name a fruit."] and len(texts) == 4


def test_a_model_that_cannot_load_leaves_the_file_as_it_was(smol_path, tmp_path, capsys):
    path = tmp_path / "chat.duet"
    assert main(_generate(path, smol_path, "Name a colour.")) == 0
    before = read_session(path)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all")
    capsys.readouterr()
    assert main(_generate(path, bad, "And a fruit?")) == 1
    err = capsys.readouterr().err
    assert err.startswith("duet-cli: error: ") and err.count("\n") == 1
    after = read_session(path)
    assert after.meta.messages == before.meta.messages and after.sections == before.sections
    new = tmp_path / "new.duet"
    assert main(_generate(new, bad, "Name a colour.")) == 1
    assert not new.exists()


def test_a_file_attached_in_a_saved_conversation_is_kept_with_its_message(smol_path, tmp_path, capsys):
    """``--attach`` with ``--session``: the file goes with its message into the conversation
    (the window shows it there), the reply reads it, and the next turn still has it."""
    notes = tmp_path / "notes.txt"
    notes.write_text("The lighthouse keeper's cat is called Biscuit. It sleeps by the lamp.\n")
    path = tmp_path / "chat.duet"
    assert main(_generate(path, smol_path, "What is the cat called?", "--attach", str(notes),
                          "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in out["sources"]] == ["notes.txt"]
    asked = read_meta(path).messages[0]
    assert asked.content == "What is the cat called?"
    assert [a.name for a in asked.attachments] == ["notes.txt"]
    assert "Biscuit" in asked.attachments[0].text
    assert main(_generate(path, smol_path, "Where does it sleep?", "--json")) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["session"]["restored_kv"] and "sources" not in again
    assert [a.name for a in read_meta(path).messages[0].attachments] == ["notes.txt"]
