"""Presets on disk: defaults, round trip, and a hand-edited file that never breaks the app."""

from __future__ import annotations

import json

import pytest

from engine.conversation.presets import DEFAULTS, load_presets, preset, save_presets


def test_defaults_then_round_trip(tmp_path) -> None:
    path = tmp_path / "presets.json"
    assert load_presets(path) == list(DEFAULTS)
    mine = [preset("Poet", "Write in verse.\nRhyme if you can.", temperature=1.1, max_tokens=64)]
    save_presets(mine, path)
    assert load_presets(path) == mine
    assert mine[0].chat_settings()["system_prompt"] == "Write in verse.\nRhyme if you can."


def test_bad_entries_are_skipped_and_bad_presets_refused(tmp_path) -> None:
    path = tmp_path / "presets.json"
    path.write_text(json.dumps({"version": 1, "presets": [
        {"name": "ok", "temperature": 0.5}, {"name": "hot", "temperature": 99},
        {"name": "", "top_p": 0.5}, "junk", {"name": "ok", "temperature": 0.1},
        {"name": "drafty", "drafter": "magic"}, {"name": "x", "max_tokens": 1.5}]}))
    assert load_presets(path) == [preset("ok", temperature=0.5)]
    path.write_text("{not json")
    assert load_presets(path) == list(DEFAULTS)
    with pytest.raises(ValueError, match="temperature"):
        preset("bad", temperature=-1.0)  # a preset cannot even hold it
