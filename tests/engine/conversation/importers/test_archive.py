"""Export everything (engine.conversation.archive, ``duet-cli export``): one zip of Markdown and
JSON with a manifest, which Duet's import reads back message by message, once."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from conftest import DATA, saved

from engine.cli.main import main
from engine.conversation.archive import MANIFEST, export_all
from engine.conversation.importers.run import import_files, signatures
from engine.conversation.projects import Projects


def library(folder: Path) -> dict[str, set[int]]:
    """Every conversation of ``folder``: its title and the messages of every version."""
    return {title: signatures(s.conv.root) for title, s in saved(folder).items()}


def test_everything_round_trips_once(home, tmp_path):
    assert len(import_files(sorted(DATA.glob("*.json")), home).added) == 8
    japan = home / "Hauptstadt von Japan 🗾.duet"
    projects = Projects(home)
    projects.add("Travel")
    projects.set_prompt("Travel", "Answer briefly.")
    projects.move([japan], "Travel")
    zip_path = tmp_path / "all.zip"
    report = export_all(zip_path, home)
    assert (report.written, report.failed) == (8, [])
    with zipfile.ZipFile(zip_path) as zf:
        manifest = json.loads(zf.read(MANIFEST))
        assert (manifest["app"], manifest["kind"], manifest["version"]) == ("duet", "library", 1)
        entries = manifest["conversations"]
        assert sorted(e["title"] for e in entries) == sorted(library(home))
        assert [e["title"] for e in entries if e.get("project") == "Travel"] == [
            "Hauptstadt von Japan 🗾"]
        assert manifest["projects"] == [{"name": "Travel", "system_prompt": "Answer briefly."}]
        for e in entries:
            md = zf.read(e["markdown"]).decode()
            assert md.startswith(f"# {e['title']}\n")
            assert json.loads(zf.read(e["json"]))["file"] == e["file"]
        assert sorted(zf.namelist()) == sorted([MANIFEST, *(e["markdown"] for e in entries),
                                                *(e["json"] for e in entries)])
    other = tmp_path / "other"
    first = import_files([zip_path], other)
    assert len(first.added) == 8 and first.n_failed == 0
    assert library(other) == library(home)  # every message of every version, every title
    assert Projects(other).members == {japan.name: "Travel"}  # (its prompt is not carried back)
    again = import_files([zip_path], other)
    assert (again.added, again.skipped) == ([], 8)
    back = import_files([zip_path], home)  # into the library it came from: nothing new
    assert (back.added, back.updated, back.skipped) == ([], [], 8)


def test_a_file_that_cannot_be_read_is_left_out_and_named(home, tmp_path):
    import_files([DATA / "claude-conversations.json"], home)
    (home / "broken.duet").write_bytes(b"not a duet file at all")
    report = export_all(tmp_path / "all.zip", home)
    assert report.written == 2 and len(report.failed) == 1
    assert report.failed[0].startswith("broken.duet: ") and "\n" not in report.failed[0]
    with zipfile.ZipFile(tmp_path / "all.zip") as zf:
        assert json.loads(zf.read(MANIFEST))["failed"] == report.failed


def test_a_zip_that_cannot_be_written_leaves_nothing(home, tmp_path):
    import_files([DATA / "claude-conversations.json"], home)
    (tmp_path / "all.zip").mkdir()  # a folder where the zip would go
    try:
        export_all(tmp_path / "all.zip", home)
    except OSError:
        pass
    else:
        raise AssertionError("a folder in the zip's place must refuse the export")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all.zip", "home"]


def test_a_damaged_archive_is_one_line_per_record(home, tmp_path):
    import_files([DATA / "claude-conversations.json"], home)
    good = tmp_path / "all.zip"
    export_all(good, home)
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        manifest = json.loads(src.read(MANIFEST))
        entries = manifest["conversations"]
        dst.writestr(entries[0]["json"], src.read(entries[0]["json"]))
        dst.writestr("json/broken.json", "{not json")
        manifest["conversations"] = [entries[0], {"json": "json/broken.json"},
                                     {"json": "json/gone.json"}, 7]
        dst.writestr(MANIFEST, json.dumps(manifest))
    report = import_files([bad], tmp_path / "other")
    assert len(report.added) == 1
    assert report.failed == [
        "bad.zip: record 1: json/broken.json is not valid JSON (Expecting property name "
        "enclosed in double quotes)",
        "bad.zip: record 2: json/gone.json is missing from the zip",
        "bad.zip: record 3: its entry in manifest.json names no JSON file"]
    (tmp_path / "odd.zip").write_bytes(b"")
    with zipfile.ZipFile(tmp_path / "odd.zip", "w") as zf:
        zf.writestr(MANIFEST, json.dumps({"app": "other"}))
    assert import_files([tmp_path / "odd.zip"], tmp_path / "other").failed == [
        "odd.zip: odd.zip is not a Duet export: its manifest.json is not Duet's"]


def test_the_command_line(home, tmp_path, capsys):
    import_files(sorted(DATA.glob("*.json")), home)
    out = tmp_path / "everything"
    assert main(["export", str(out)]) == 0
    assert capsys.readouterr() == (f"8 conversations exported to {out}.zip\n", "")
    assert main(["import", f"{out}.zip", "--into", str(tmp_path / "back")]) == 0
    assert capsys.readouterr().out == "8 conversations imported, 0 already there, 0 failed\n"
    assert library(tmp_path / "back") == library(home)
