"""Damaged local files recover: settings, the verify-cost cache and the recent-files list give
defaults with a warning, the damaged file kept aside as ``<name>.bad``; never a traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.control.conversation import RecentFiles
from app.control.settings import DEFAULTS, Settings, load
from engine.localfile import read_json, write_json

DAMAGED = {
    "not utf-8": b"\xff\xfe{\x00\"values\": 1}",
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "nested in values": b'{"version": 1, "values": {"seed": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
    "not an object": b"[1, 2, 3]",
    "values not an object": b'{"version": 1, "values": [1]}',
    "truncated": b'{"version": 1, "values": {"seed": 4',
    "NaN literal": b'{"version": 1, "values": {"temperature": NaN}}',
}


@pytest.mark.parametrize("content", DAMAGED.values(), ids=DAMAGED.keys())
def test_damaged_settings_give_defaults_and_are_kept_aside(tmp_path: Path, content: bytes,
                                                           caplog) -> None:
    path = tmp_path / "settings.json"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        s = Settings(path)
    assert dict(s.values) == dict(DEFAULTS)
    assert (tmp_path / "settings.json.bad").read_bytes() == content and not path.exists()
    assert "settings.json" in caplog.text and "\n" not in caplog.records[-1].getMessage()
    s.set("top_k", 12)  # and the app can save again
    assert load(path)["top_k"] == 12


def test_wrong_types_and_non_finite_values_fall_back(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text('{"version": 1, "values": {"temperature": 1e999, "top_p": "0.5", '
                    '"seed": 3.5, "threads": true, "top_k": 9}}')
    values = load(path)
    assert values["temperature"] == DEFAULTS["temperature"] and values["top_p"] == DEFAULTS["top_p"]
    assert values["seed"] == DEFAULTS["seed"] and values["n_threads"] == DEFAULTS["n_threads"]
    assert values["top_k"] == 9 and path.exists()  # readable file, bad values: not set aside
    with pytest.raises(ValueError, match="finite"):
        Settings(path).set("temperature", float("nan"))


@pytest.mark.parametrize("content", DAMAGED.values(), ids=DAMAGED.keys())
def test_damaged_recent_files_list(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "recent.json"
    path.write_bytes(content)
    recent = RecentFiles(path)
    assert recent.items == [] and (tmp_path / "recent.json.bad").exists()
    recent.add(tmp_path / "a.duet")
    assert RecentFiles(path).items == [(tmp_path / "a.duet").resolve()]


def test_verify_cost_cache_damage_is_recovered(tmp_path: Path) -> None:
    from engine.decode.speculative.calibration import _check_cost_cache, curve_from_points

    path = tmp_path / "verify-cost.json"
    for content in DAMAGED.values():
        path.write_bytes(content)
        got = read_json(path, _check_cost_cache)
        assert got is None or isinstance(got, dict)
    # a file of deeply nested JSON: set aside, never a RecursionError
    path.write_bytes(b"[" * 100_000)
    assert read_json(path, _check_cost_cache) is None
    with pytest.raises(ValueError):
        curve_from_points([[[[1]]]])


def test_writes_go_through_unique_temporaries(tmp_path: Path, monkeypatch) -> None:
    import tempfile

    names = []
    real = tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda **k: names.append(real(**k)) or names[-1])
    write_json(tmp_path / "c.json", {"a": 1})
    write_json(tmp_path / "c.json", {"a": 2})
    assert len({n for _, n in names}) == 2 and all(Path(n).parent == tmp_path for _, n in names)
    assert read_json(tmp_path / "c.json") == {"a": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]
    with pytest.raises(ValueError):
        write_json(tmp_path / "c.json", {"a": float("nan")})
    assert read_json(tmp_path / "c.json") == {"a": 2}
