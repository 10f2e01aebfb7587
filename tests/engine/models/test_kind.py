"""What a model file is for, from its header (engine.models.kind): the real all-MiniLM-L6-v2 is
an embedding model, the chat models are not; a header that cannot be read says nothing."""

from __future__ import annotations

from pathlib import Path

from engine.models.kind import embedding_only, is_embedding_file
from tests.conftest import model_path


def test_the_embedding_model_is_told_from_the_chat_models() -> None:
    assert is_embedding_file(model_path("embed"))
    for key in ("test", "gemma", "draft"):
        assert not is_embedding_file(model_path(key)), key


def test_an_encoder_a_pooling_type_or_non_causal_attention_make_an_embedding_model() -> None:
    assert embedding_only({"general.architecture": "nomic-bert"})
    assert embedding_only({"general.architecture": "qwen3", "qwen3.pooling_type": 3})
    assert embedding_only({"general.architecture": "gemma3", "gemma3.attention.causal": False})
    assert not embedding_only({"general.architecture": "llama", "llama.block_count": 30})
    assert not embedding_only({})


def test_a_file_whose_header_cannot_be_read_is_not_called_an_embedding_model(tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model_path("embed").read_bytes()[:2000])  # ends inside its header
    assert not is_embedding_file(cut)
    assert not is_embedding_file(tmp_path / "gone.gguf")
