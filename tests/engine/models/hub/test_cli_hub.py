"""``duet-cli models search|files|download|pair`` with --json, against the fake Hub."""

from __future__ import annotations

import json

from fakehub_repos import (
    DRAFT_REPO,
    GATED_REPO,
    GEMMA_REPO,
    SMALL_FILE,
    SMALL_REPO,
    SMOL_REPO,
    TARGET_FILE,
    TARGET_REPO,
)

from engine.cli.models import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_search_and_files(hub, capsys):
    code, out, _ = run(capsys, "search", "qwen", "--json")
    assert code == 0 and [h["repo"] for h in json.loads(out)] == [TARGET_REPO, DRAFT_REPO]
    code, out, _ = run(capsys, "files", SMOL_REPO, "--json", "--fit", "SmolLM2-135M-Instruct-Q4_1.gguf")
    doc = json.loads(out)
    assert code == 0 and doc["entries"][0]["quant"] == "Q4_1" and doc["fit"]["verdict"] == "fits"
    code, out, _ = run(capsys, "files", GATED_REPO)
    assert code == 0 and "gated: manual" in out


def test_download_into_the_models_folder(hub, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DUET_MODELS_DIR", str(tmp_path / "models"))
    code, out, err = run(capsys, "download", SMALL_REPO, SMALL_FILE, "--json")
    assert code == 0 and json.loads(out)["path"] == str(
        tmp_path / "models" / "test" / "small-GGUF" / SMALL_FILE)
    assert "done" in err
    code, _, err = run(capsys, "download", GATED_REPO, "gated-Q8_0.gguf")
    assert code == 1 and err.count("\n") == 1 and "HF_TOKEN" in err


def test_pair(hub, capsys):
    code, out, _ = run(capsys, "pair", f"{TARGET_REPO}/{TARGET_FILE}", "--candidate", GEMMA_REPO, "--no-local",
                       "--json")
    doc = json.loads(out)
    assert code == 0 and doc["facts"]["n_vocab"] == 151936
    verdicts = {d["candidate"].split("/")[0] + "/" + d["candidate"].split("/")[1]: d for d in doc["drafts"]}
    assert verdicts[DRAFT_REPO]["ok"] and not verdicts[GEMMA_REPO]["ok"]
    code, out, _ = run(capsys, "pair", f"{TARGET_REPO}/{TARGET_FILE}", "--no-local")
    assert "compatible" in out and "checked" in out


def test_no_network_is_one_line(hub, capsys):
    hub.stop()
    code, _, err = run(capsys, "search", "qwen")
    assert code == 1 and "cannot reach Hugging Face" in err and err.count("\n") == 1


def test_pair_judges_the_downloads_in_the_models_folder(hub, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DUET_MODELS_DIR", str(tmp_path / "models"))
    code, out, _ = run(capsys, "download", SMALL_REPO, SMALL_FILE, "--json")
    path = json.loads(out)["path"]
    code, out, _ = run(capsys, "pair", f"{TARGET_REPO}/{TARGET_FILE}", "--json")
    assert code == 0 and path in [d["candidate"] for d in json.loads(out)["drafts"]]
