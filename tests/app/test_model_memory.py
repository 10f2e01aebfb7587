"""Per-model settings: choosing a model again brings back what it was last used with."""

from __future__ import annotations

from tests.conftest import model_path


def test_each_model_brings_back_its_own_settings(qtbot, window, driver, settings, smol_path) -> None:
    gemma = model_path("gemma")
    driver.load(smol_path)
    settings.update({"n_ctx": 1024, "temperature": 0.3})  # remembered for SmolLM2
    driver.load(gemma)  # no record yet: the current values carry over, then are its own
    assert settings["n_ctx"] == 1024
    settings.update({"n_ctx": 3072, "temperature": 0.9})
    info = driver.load(smol_path)
    assert (settings["n_ctx"], settings["temperature"]) == (1024, 0.3)
    assert info.n_ctx >= 1024 and info.target_path == smol_path
    driver.load(gemma)
    assert (settings["n_ctx"], settings["temperature"]) == (3072, 0.9)
