"""``duet-cli import``, in-process: the summary, the one-line errors, and an imported
conversation that opens as a saved one and continues with the real small model through
``duet-cli generate --session``."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import DATA, saved

from engine.cli import importing
from engine.cli.main import main
from engine.conversation.importers.run import Progress
from engine.conversation.session import read_meta
from engine.conversation.session.store import open_contexts


def run_cli(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_import_twice_and_a_bad_file(home, capsys, tmp_path):
    files = sorted(DATA.glob("*.json"))
    code, out, err = run_cli(capsys, "import", *files)
    assert (code, out, err) == (0, "8 conversations imported, 0 already there, 0 failed\n", "")
    code, out, err = run_cli(capsys, "import", *files)
    assert (code, out, err) == (0, "0 conversations imported, 8 already there, 0 failed\n", "")
    bad = tmp_path / "conversations.json"
    bad.write_text('[{"title": "t", "mapping": {"a": {"parent": "a", "message": '
                   '{"author": {"role": "alien"}}}}}, {"chat_messages": 3}]')
    code, out, err = run_cli(capsys, "import", bad, tmp_path / "gone.zip", "--json")
    assert code == 1 and json.loads(out) == {"added": [], "updated": [], "skipped": 0, "failed": [
        'conversations.json: record 0 ("t"): mapping node ' + "'a' has the unknown role 'alien'",
        "conversations.json: record 1: it is not a conversation of a format Duet reads "
        "(ChatGPT, Claude, Open WebUI, LM Studio, llama.cpp web UI, Duet)",
        "gone.zip: cannot read gone.zip: No such file or directory"], "n_failed": 3}
    assert err.count("\n") == 3 and all(line.startswith("duet-cli: import: ")
                                         for line in err.splitlines())
    assert "Traceback" not in err and len(list(home.glob("*.duet"))) == 8


def test_progress_line():
    p = Progress(Path("conversations.json"), 50, 200, 3, 2, 1, 0)
    assert importing.progress_line(p) == ("importing conversations.json: 25% read, 3 added, "
                                          "2 updated, 1 already there, 0 failed")


def test_an_imported_conversation_opens_and_continues_with_the_model(home, smol_path, capsys):
    code, _, _ = run_cli(capsys, "import", DATA / "chatgpt-conversations.json", "--into", home)
    path = home / "Hauptstadt von Japan 🗾.duet"
    before = saved(home)["Hauptstadt von Japan 🗾"]
    opened = open_contexts(path, None)
    assert [(m.role, m.content) for m in opened.messages] == before.shown
    assert not opened.restored_kv and opened.note == "the model this conversation used is missing: gpt-4o"
    # --drafter none: no verify-cost calibration in this test's fresh home (~14 s here)
    code, out, err = run_cli(capsys, "generate", "--model", smol_path, "--temperature", "0",
                             "--max-tokens", "8", "--ctx", "2048", "--threads", "2",
                             "--drafter", "none", "--json", "--session", path,
                             "Und wie heißt der größte Berg?")
    reply = json.loads(out)
    assert code == 0 and err == "" and reply["text"]
    assert reply["session"]["restored_kv"] is False and reply["session"]["note"] is None
    assert reply["n_cached_tokens"] == 0 and reply["n_prompt_tokens"] > 100  # the history, read once
    after = saved(home)["Hauptstadt von Japan 🗾"]
    assert after.shown == before.shown + [("user", "Und wie heißt der größte Berg?"),
                                          ("assistant", reply["text"])]
    assert after.conv.versions(2) == (2, 2)  # the imported versions are kept
    assert after.imported == before.imported  # still known as imported: not imported twice
    assert read_meta(path).kv_target is not None  # saved with its KV state now
    code, out, _ = run_cli(capsys, "import", DATA / "chatgpt-conversations.json", "--into", home)
    assert out.startswith("0 conversations imported, 2 already there")
