"""The settings schema, its file, its signal, and the engine parameters it produces."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from app.control import settings as S
from app.control.settings import DEFAULTS, OPTIONS, SCHEMA, Settings, load
from engine.errors import DuetError
from engine.runtime.runtime import RuntimeConfig


def test_schema_is_consistent() -> None:
    assert len(OPTIONS) == len(SCHEMA)
    for o in SCHEMA:
        assert o.applies in ("now", "reload")
        assert o.validate(o.default) == o.default
        assert o.description and o.label


def test_defaults_without_a_file(tmp_path: Path) -> None:
    s = Settings(tmp_path / "settings.json")
    assert dict(s.values) == dict(DEFAULTS)
    assert not (tmp_path / "settings.json").exists()  # reading never writes


def test_update_persists_with_version_and_rereads(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "settings.json"
    s = Settings(path)
    assert s.update({"temperature": 0.2, "theme": "dark", "draft_max": 8}) == \
        ["temperature", "theme", "draft_max"]
    data = json.loads(path.read_text())
    assert data["version"] == S.VERSION
    assert data["values"]["temperature"] == 0.2 and data["values"]["theme"] == "dark"
    assert set(data["values"]) == set(OPTIONS)
    again = Settings(path)
    assert again["temperature"] == 0.2 and again["theme"] == "dark" and again["draft_max"] == 8
    assert [p.name for p in path.parent.iterdir()] == ["settings.json"]  # no temp file left


def test_changed_fires_once_per_changed_option(qtbot, tmp_path: Path) -> None:
    s = Settings(tmp_path / "settings.json")
    seen: list[str] = []
    s.changed.connect(seen.append)
    s.update({"top_k": 10, "top_p": DEFAULTS["top_p"]})  # top_p unchanged
    s.set("top_k", 10)  # no change, no signal
    assert seen == ["top_k"]


def test_invalid_update_changes_nothing(tmp_path: Path) -> None:
    s = Settings(tmp_path / "settings.json")
    with pytest.raises(ValueError):
        s.update({"temperature": 0.5, "top_k": -3})
    with pytest.raises(ValueError):
        s.update({"no_such_option": 1})
    with pytest.raises(ValueError):
        s.set("save_kv", 1)  # an int is not a bool
    with pytest.raises(ValueError):
        s.set("theme", "purple")
    assert s["temperature"] == DEFAULTS["temperature"]
    assert not (tmp_path / "settings.json").exists()


def test_bad_values_in_the_file_fall_back_with_a_warning(tmp_path: Path, caplog) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "values": {
        "temperature": "hot", "top_k": 500000, "seed": 7, "mystery": True, "autosave": False}}))
    with caplog.at_level(logging.WARNING, logger="app.control.settings"):
        s = Settings(path)
    assert s["temperature"] == DEFAULTS["temperature"]
    assert s["top_k"] == DEFAULTS["top_k"]
    assert s["seed"] == 7 and s["autosave"] is False
    text = caplog.text
    assert "temperature" in text and "top_k" in text and "mystery" in text


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"version": 1}', ""])
def test_corrupt_file_gives_defaults(tmp_path: Path, content: str, caplog) -> None:
    path = tmp_path / "settings.json"
    path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="app.control.settings"):
        s = Settings(path)
    assert dict(s.values) == dict(DEFAULTS)
    assert caplog.records


def test_newer_version_reads_what_it_can(tmp_path: Path, caplog) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 99, "values": {"top_k": 12}}))
    with caplog.at_level(logging.WARNING, logger="app.control.settings"):
        assert Settings(path)["top_k"] == 12
    assert "version 99" in caplog.text


def test_sampling_params_mapping() -> None:
    values = {**DEFAULTS, "temperature": 0.3, "top_k": 7, "top_p": 0.5, "min_p": 0.1,
              "repeat_penalty": 1.2, "seed": -1, "max_tokens": 99}
    p = S.sampling_params(values)
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.seed, p.max_tokens) == \
        (0.3, 7, 0.5, 0.1, 1.2, -1, 99)
    assert S.sampling_params({**values, "seed": 42}).seed == 42


def test_speculative_params_mapping() -> None:
    assert S.speculative_params({**DEFAULTS, "drafter": "none"}).drafter == "none"
    p = S.speculative_params({**DEFAULTS, "drafter": "ngram", "draft_max": 4, "draft_min": 9,
                              "ngram_min": 6, "ngram_max": 3, "p_min": 0.5})
    assert (p.drafter, p.draft_max, p.draft_min, p.ngram_min, p.ngram_max, p.p_min) == \
        ("ngram", 4, 4, 3, 3, 0.5)
    with pytest.raises(DuetError, match="no draft model"):
        S.speculative_params({**DEFAULTS, "drafter": "model"}, has_draft=False)


def test_runtime_config_mapping(tmp_path: Path) -> None:
    values = {**DEFAULTS, "n_ctx": 1024, "n_threads": 3, "gpu_layers_target": 5,
              "gpu_layers_draft": -1}
    cfg = S.config_from_settings(values, tmp_path / "t.gguf", tmp_path / "d.gguf")
    assert cfg.target.path == tmp_path / "t.gguf" and cfg.target.n_gpu_layers == 5
    assert cfg.draft.path == tmp_path / "d.gguf" and cfg.draft.n_gpu_layers == -1
    assert cfg.context.n_ctx == 1024 and cfg.context.n_threads == 3
    assert cfg.speculative.drafter == "auto"
    assert cfg.state_cache_bytes == DEFAULTS["state_cache_mb"] << 20 == RuntimeConfig.state_cache_bytes
    assert S.config_from_settings({**values, "state_cache_mb": 0}, tmp_path / "t.gguf").state_cache_bytes == 0
    assert S.config_from_settings(values, tmp_path / "t.gguf").draft is None


def test_a_version_1_file_keeps_its_values_under_the_new_names(tmp_path: Path) -> None:
    """Version 1 named two options otherwise and had a separate switch for speculation."""
    path = tmp_path / "settings.json"
    path.write_text('{"version": 1, "values": {"context_size": 1024, "threads": 2, '
                    '"speculative": false, "drafter": "ngram"}}')
    values = load(path)
    assert (values["n_ctx"], values["n_threads"], values["drafter"]) == (1024, 2, "none")
