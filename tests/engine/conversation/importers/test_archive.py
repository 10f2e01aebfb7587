"""Export everything (engine.conversation.archive, ``duet-cli export``): one zip of Markdown and
JSON with a manifest, which Duet's import reads back message by message, once."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from conftest import DATA, saved

from engine.chat.messages import Attachment
from engine.cli.main import main
from engine.conversation.archive import MANIFEST, export_all
from engine.conversation.importers.run import import_files, signatures
from engine.conversation.projects import Project, Projects


def library(folder: Path) -> dict[str, set[int]]:
    """Every conversation of ``folder``: its title and the messages of every version."""
    return {title: signatures(s.conv.root) for title, s in saved(folder).items()}


def test_everything_round_trips_once(home, tmp_path):
    assert len(import_files(sorted(DATA.glob("*.json")), home).added) == 8
    japan = home / "Hauptstadt von Japan 🗾.duet"
    projects = Projects(home)
    projects.add("Travel")
    projects.set_prompt("Travel", "Answer briefly.")
    projects.set_preset("Travel", "Precise")
    guide = Attachment("guide.md", "text", "ab" * 32, "# Tokyo\nTrains run till midnight. 🚆", (0,))
    projects.add_files("Travel", [guide])
    projects.add("Empty")
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
        member = f"project-files/{guide.sha256}.json"
        assert manifest["projects"] == [
            {"name": "Travel", "system_prompt": "Answer briefly.", "preset": "Precise",
             "files": [{"name": "guide.md", "sha256": guide.sha256, "json": member}]},
            {"name": "Empty", "system_prompt": "", "preset": "", "files": []}]
        assert json.loads(zf.read(member))["text"] == guide.text
        for e in entries:
            md = zf.read(e["markdown"]).decode()
            assert md.startswith(f"# {e['title']}\n")
            assert json.loads(zf.read(e["json"]))["file"] == e["file"]
        assert sorted(zf.namelist()) == sorted([MANIFEST, member,
                                                *(e["markdown"] for e in entries),
                                                *(e["json"] for e in entries)])
    other = tmp_path / "other"
    first = import_files([zip_path], other)
    assert len(first.added) == 8 and first.n_failed == 0
    assert library(other) == library(home)  # every message of every version, every title
    assert Projects(other).members == {japan.name: "Travel"}
    assert Projects(other).projects == Projects(home).projects  # prompt, preset, files, the empty one
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
    assert Projects(tmp_path / "other").names == []  # its manifest has no projects
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:  # odd projects
        manifest = json.loads(src.read(MANIFEST))
        for e in manifest["conversations"]:
            dst.writestr(e["json"], src.read(e["json"]))
        dst.writestr("project-files/x.json", json.dumps({"kind": 3}))
        manifest["projects"] = [7, {"name": ["x"]}, {"name": "  "}, {
            "name": "Notes", "system_prompt": 5, "preset": None, "files": [
                {"name": "gone.md", "sha256": "cd" * 32, "json": "project-files/gone.json"},
                {"name": "x.md", "sha256": "ef" * 32, "json": "project-files/x.json"},
                {"name": "bad sha.md", "sha256": "../..", "json": "project-files/x.json"}, 4]}]
        dst.writestr(MANIFEST, json.dumps(manifest))
    report = import_files([bad], tmp_path / "third")
    assert report.n_failed == 0 and len(report.added) == len(manifest["conversations"])
    assert list(Projects(tmp_path / "third").projects.values()) == [Project("Notes")]
    (tmp_path / "odd.zip").write_bytes(b"")
    with zipfile.ZipFile(tmp_path / "odd.zip", "w") as zf:
        zf.writestr(MANIFEST, json.dumps({"app": "other"}))
    assert import_files([tmp_path / "odd.zip"], tmp_path / "other").failed == [
        "odd.zip: odd.zip is not a Duet export: its manifest.json is not Duet's"]


def test_a_project_joins_the_one_already_there_whatever_its_case(home, tmp_path):
    import_files([DATA / "claude-conversations.json"], home)
    first = sorted(home.glob("*.duet"))[0]
    projects = Projects(home)
    projects.add("Travel")
    projects.set_prompt("Travel", "Answer briefly.")
    projects.move([first], "Travel")
    export_all(tmp_path / "all.zip", home)
    other = tmp_path / "other"
    Projects(other).add("travel")
    Projects(other).set_prompt("travel", "Mine.")
    assert import_files([tmp_path / "all.zip"], other).n_failed == 0
    assert Projects(other).names == ["travel"] and Projects(other).members == {first.name: "travel"}
    assert Projects(other).projects["travel"].system_prompt == "Mine."  # its own kept


def test_the_command_line(home, tmp_path, capsys):
    import_files(sorted(DATA.glob("*.json")), home)
    out = tmp_path / "everything"
    assert main(["export", str(out)]) == 0
    assert capsys.readouterr() == (f"8 conversations exported to {out}.zip\n", "")
    assert main(["import", f"{out}.zip", "--into", str(tmp_path / "back")]) == 0
    assert capsys.readouterr().out == "8 conversations imported, 0 already there, 0 failed\n"
    assert library(tmp_path / "back") == library(home)
