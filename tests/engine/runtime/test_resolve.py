"""Naming a model on the command line: a path, a starter key, or a file name in the models folder."""

from __future__ import annotations

from engine.runtime.runtime import resolve_model


def test_a_file_name_is_found_in_the_models_folder(tmp_path, monkeypatch):
    models = tmp_path / "models"
    (models / "someone" / "repo-GGUF").mkdir(parents=True)
    hub_file = models / "someone" / "repo-GGUF" / "tiny-q4_k_m.gguf"
    hub_file.write_bytes(b"GGUF")
    (models / "top.gguf").write_bytes(b"GGUF")
    monkeypatch.setenv("DUET_MODELS_DIR", str(models))
    monkeypatch.chdir(tmp_path)
    assert resolve_model("tiny-q4_k_m.gguf") == hub_file
    assert resolve_model("top.gguf") == models / "top.gguf"
    # a file of that name in the current folder is the one meant; a path is taken as it is
    (tmp_path / "top.gguf").write_bytes(b"GGUF")
    assert resolve_model("top.gguf").resolve() == (tmp_path / "top.gguf").resolve()
    assert resolve_model("elsewhere/tiny-q4_k_m.gguf") == tmp_path.joinpath(
        "elsewhere", "tiny-q4_k_m.gguf").relative_to(tmp_path)
    assert resolve_model("missing.gguf").name == "missing.gguf"  # the loader says it is missing
