"""The one atomic write: the old file or the new, never half, no temporary left, mode kept."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from engine.localfile import STALE_S, TEMP_MARK, atomic_write, read_json, write_bytes, write_json


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "a.bin"
    write_bytes(path, b"first")  # the folder is made
    write_bytes(path, b"second", durable=False)
    assert path.read_bytes() == b"second" and names(path.parent) == ["a.bin"]


def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    write_bytes(path, b"old")
    with pytest.raises(RuntimeError), atomic_write(path) as f:
        f.write(b"half of the n")
        raise RuntimeError("the disk is full")
    assert path.read_bytes() == b"old" and names(tmp_path) == ["a.bin"]
    with pytest.raises(ValueError):
        write_json(path, {"x": float("nan")})
    assert path.read_bytes() == b"old" and names(tmp_path) == ["a.bin"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_is_private_unless_a_document_and_a_replaced_one_keeps_its_mode(
        tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_json(path, {"a": 1})
    assert mode(path) == 0o600  # settings and tool configurations hold keys
    os.chmod(path, 0o640)
    write_json(path, {"a": 2})
    assert mode(path) == 0o640 and read_json(path) == {"a": 2}
    umask = os.umask(0)
    os.umask(umask)
    document = tmp_path / "b.duet"
    write_bytes(document, b"x", private=False)
    assert mode(document) == 0o666 & ~umask  # as open() would make it


def test_json_keeps_the_key_order_unless_asked_to_sort(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_json(path, {"b": 1, "a": 2}, indent=1)
    assert list(json.loads(path.read_text())) == ["b", "a"]
    write_json(path, {"b": 1, "a": 2}, indent=1, sort_keys=True)
    assert list(json.loads(path.read_text())) == ["a", "b"]


def test_temporaries_left_by_a_crash_are_removed_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    stale = tmp_path / ("a.json" + TEMP_MARK + "abc123")
    fresh = tmp_path / ("a.json" + TEMP_MARK + "def456")  # a write under way elsewhere
    other = tmp_path / ("b.json" + TEMP_MARK + "abc123")  # another file's
    for f in (stale, fresh, other):
        f.write_bytes(b"half a write")
    old = time.time() - 2 * STALE_S
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    write_json(path, {"a": 1})
    assert names(tmp_path) == sorted(["a.json", fresh.name, other.name])
