"""Projects (engine.conversation.projects): one small file beside the conversations says which
project each is in; it survives a restart, follows renames and deletions, and a damaged one
loses the memberships only."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from engine.chat.messages import Attachment
from engine.conversation.projects import FILENAME, FILES_DIR, Project, Projects
from engine.localfile import MAX_BYTES


def test_projects_and_their_conversations(tmp_path: Path) -> None:
    p = Projects(tmp_path)
    assert p.add("  Trip   to Japan ").name == "Trip to Japan"
    assert p.add("trip to japan").name == "trip to japan (2)"  # names are unique, any case
    with pytest.raises(ValueError):
        p.add("   ")
    p.set_prompt("Trip to Japan", " Answer in Japanese. ")
    p.set_preset("Trip to Japan", "Precise")
    a, b = tmp_path / "a.duet", tmp_path / "b.duet"
    p.move([a, b], "Trip to Japan")
    p.move([b], None)
    assert p.of(a) == Project("Trip to Japan", "Answer in Japanese.", "Precise") and p.of(b) is None
    p.renamed(a, tmp_path / "c.duet")
    assert p.of(a) is None and p.of(tmp_path / "c.duet").name == "Trip to Japan"
    assert p.rename("Trip to Japan", "Japan") == "Japan"
    assert p.rename("Japan", "TRIP TO JAPAN (2)") == "Japan"  # taken: unchanged
    again = Projects(tmp_path)  # as written
    assert again.names == ["Japan", "trip to japan (2)"]
    assert again.of(tmp_path / "c.duet") == Project("Japan", "Answer in Japanese.", "Precise")
    again.set_preset("Japan", None)
    assert Projects(tmp_path).of(tmp_path / "c.duet").preset == ""
    again.remove("Japan")
    again.forget(tmp_path / "c.duet")
    assert Projects(tmp_path).names == ["trip to japan (2)"]
    assert Projects(tmp_path).members == {}


@pytest.mark.parametrize("damage", [b"{not json", b'{"version": 9, "projects": [], "members": {}}',
                                    b'{"version": 1, "projects": 3, "members": {}}'])
def test_a_damaged_file_is_set_aside(tmp_path: Path, damage: bytes) -> None:
    (tmp_path / FILENAME).write_bytes(damage)
    p = Projects(tmp_path)
    assert p.names == [] and p.members == {}
    assert (tmp_path / (FILENAME + ".bad")).read_bytes() == damage


def test_odd_entries_are_dropped_one_by_one(tmp_path: Path) -> None:
    (tmp_path / FILENAME).write_text(json.dumps({"version": 1, "members": {
        "a.duet": "Work", "b.duet": "Gone", "c.duet": 5},
        "projects": [{"name": "Work", "system_prompt": 3, "preset": [1]}, {"name": ""}, "x", {"name": 4}]}))
    p = Projects(tmp_path)
    assert p.names == ["Work"] and p.of(tmp_path / "a.duet") == Project("Work", "")
    assert p.members == {"a.duet": "Work"}


def doc(name: str, text: str) -> Attachment:
    return Attachment(name, "text", hashlib.sha256(text.encode()).hexdigest(), text, (0,), "whole")


def test_a_projects_files_are_kept_once_by_content(tmp_path: Path) -> None:
    p = Projects(tmp_path)
    p.add("Manuals")
    p.add("Other")
    guide, notes = doc("guide.md", "Press the red button twice. ünï ✓"), doc("notes.txt", "Notes")
    p.add_files("Manuals", [guide, notes, guide])
    p.add_files("Other", [doc("copy.md", guide.text)])  # the same content, another name
    again = Projects(tmp_path)
    assert again.projects["Manuals"].files == (replace(guide, mode="auto"),
                                              replace(notes, mode="auto"))
    assert [a.name for a in again.projects["Other"].files] == ["copy.md"]
    # each content kept once
    assert sorted(f.name for f in (tmp_path / FILES_DIR).iterdir()) == \
        sorted(f"{a.sha256}.json" for a in (guide, notes))
    again.remove_file("Manuals", guide.sha256)  # still Other's: its record stays
    assert [a.name for a in Projects(tmp_path).projects["Manuals"].files] == ["notes.txt"]
    assert (tmp_path / FILES_DIR / f"{guide.sha256}.json").exists()
    again.remove("Other")  # nobody's now: gone
    assert not (tmp_path / FILES_DIR / f"{guide.sha256}.json").exists()
    again.remove("Manuals")
    assert list((tmp_path / FILES_DIR).iterdir()) == []


def test_a_damaged_or_missing_file_record_is_left_out(tmp_path: Path) -> None:
    p = Projects(tmp_path)
    p.add("Manuals")
    a, b = doc("a.md", "first"), doc("b.md", "second")
    p.add_files("Manuals", [a, b])
    (tmp_path / FILES_DIR / f"{a.sha256}.json").write_text('{"kind": 3}')
    again = Projects(tmp_path)
    assert [f.name for f in again.projects["Manuals"].files] == ["b.md"]
    (tmp_path / FILES_DIR / f"{b.sha256}.json").unlink()
    assert Projects(tmp_path).projects["Manuals"].files == ()
    assert Projects(tmp_path).names == ["Manuals"]


def test_a_file_too_large_for_a_project_is_refused(tmp_path: Path) -> None:
    p = Projects(tmp_path)
    p.add("Big")
    with pytest.raises(ValueError, match="too large to keep with a project"):
        p.add_files("Big", [doc("big.txt", "é" * (MAX_BYTES // 5))])  # \u00e9 as JSON: 6 bytes
    assert Projects(tmp_path).projects["Big"].files == ()
