"""Projects (engine.conversation.projects): one small file beside the conversations says which
project each is in; it survives a restart, follows renames and deletions, and a damaged one
loses the memberships only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.conversation.projects import FILENAME, Project, Projects


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
