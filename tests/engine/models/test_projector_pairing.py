"""A projector is told from a model by its name, paired with its model by name, checked by its
header (engine.models.projector)."""

from __future__ import annotations

from engine.models.projector import find_projector, is_projector_name, pair, problem
from tests.images import write_projector


def test_names_pair_a_projector_with_its_model():
    assert is_projector_name("ggml-org/SmolVLM-500M-Instruct-GGUF/mmproj-SmolVLM-500M-Instruct-Q8_0.gguf")
    assert not is_projector_name("SmolVLM-500M-Instruct-Q8_0.gguf")
    repo = ["mmproj-SmolVLM-500M-Instruct-Q8_0.gguf", "mmproj-SmolVLM-500M-Instruct-f16.gguf"]
    assert pair("SmolVLM-500M-Instruct-Q8_0.gguf", repo) == repo[0]  # the same quantization
    assert pair("SmolVLM-500M-Instruct-Q4_K_M.gguf", repo) == repo[1]  # else F16
    assert pair("ggml-model-q4_k.gguf", ["mmproj-model-f16.gguf"]) == "mmproj-model-f16.gguf"  # LLaVA's
    assert pair("other-model-Q4_K_M.gguf", ["mmproj-model-f16.gguf"], alone=False) is None
    assert pair("x.gguf", []) is None


def test_the_header_says_whether_it_fits(tmp_path, smol_path):
    p = write_projector(tmp_path / "mmproj-a.gguf", 576)
    assert problem(p, 576) is None
    assert "another width" in problem(p, 896)
    assert "not a projector" in problem(smol_path, 576)


def test_found_beside_the_model_when_it_fits(tmp_path, smol_path):
    model = tmp_path / "smollm2-135m-instruct-q4_1.gguf"
    model.symlink_to(smol_path)
    assert find_projector(model, 576) is None
    write_projector(tmp_path / "mmproj-smollm2-135m-instruct-f16.gguf", 896)  # another model's width
    assert find_projector(model, 576) is None
    good = write_projector(tmp_path / "mmproj-smollm2-135m-instruct-q4_1.gguf", 576)
    assert find_projector(model, 576) == good


def test_a_vision_repository_lists_models_each_with_its_projector():
    from engine.models.hub.files import RemoteFile, group_gguf

    files = [RemoteFile(p, s, None) for p, s in [
        ("SmolVLM-500M-Instruct-Q8_0.gguf", 437), ("SmolVLM-500M-Instruct-f16.gguf", 820),
        ("mmproj-SmolVLM-500M-Instruct-Q8_0.gguf", 109), ("mmproj-SmolVLM-500M-Instruct-f16.gguf", 199),
        ("README.md", 1)]]
    entries = group_gguf(files)
    assert [(e.name, e.projector and e.projector.path) for e in entries] == [
        ("SmolVLM-500M-Instruct-Q8_0.gguf", "mmproj-SmolVLM-500M-Instruct-Q8_0.gguf"),
        ("SmolVLM-500M-Instruct-f16.gguf", "mmproj-SmolVLM-500M-Instruct-f16.gguf")]
    assert entries[0].size == 437 + 109  # fetched together


def test_the_models_folder_lists_no_projector(tmp_path, smol_path):
    from engine.models.folder import local_models

    (tmp_path / "model-Q4_K_M.gguf").write_bytes(b"GGUF")
    write_projector(tmp_path / "mmproj-model-f16.gguf", 576)
    assert [p.name for p in local_models(tmp_path)] == ["model-Q4_K_M.gguf"]
