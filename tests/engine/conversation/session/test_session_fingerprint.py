"""Model fingerprints (bounded I/O) and the checks that decide whether a saved KV state fits."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from blake3 import blake3

from engine.conversation.session import KVLayout, ModelInfo, check_model, file_fingerprint, kv_layout
from engine.errors import ModelLoadError, SessionError

MIB = 1024 * 1024
LAYOUT = KVLayout(n_ctx=4096, type_k="f16", type_v="f16", n_layer=28, n_embd_k_gqa=256,
                  n_embd_v_gqa=256)


def expected(head: bytes, tail: bytes, size: int) -> str:
    return f"v1:{size}:" + blake3(head + tail + struct.pack("<Q", size)).hexdigest()


def poke(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_small_file_hashes_the_whole_file_once(tmp_path):
    data = os.urandom(3 * MIB + 17)
    path = tmp_path / "s.gguf"
    path.write_bytes(data)
    assert file_fingerprint(path) == expected(data, b"", len(data))
    (tmp_path / "e.gguf").write_bytes(b"")
    assert file_fingerprint(tmp_path / "e.gguf") == expected(b"", b"", 0)
    exact = os.urandom(16 * MIB)
    path.write_bytes(exact)
    assert file_fingerprint(path) == expected(exact, b"", 16 * MIB)


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """A sparse 1 GiB file with random head and tail."""
    path = tmp_path_factory.mktemp("fp") / "big.gguf"
    with open(path, "wb") as f:
        f.truncate(1 << 30)
    poke(path, 0, os.urandom(8 * MIB + 5))
    poke(path, (1 << 30) - 8 * MIB - 5, os.urandom(8 * MIB + 5))
    return path


def test_large_file_reads_only_head_and_tail(big):
    size = big.stat().st_size
    with open(big, "rb") as f:
        head = f.read(8 * MIB)
        f.seek(size - 8 * MIB)
        tail = f.read()
    fp = file_fingerprint(big)
    assert fp == expected(head, tail, size) and fp.startswith(f"v1:{1 << 30}:")
    # Its speed (a sparse 1 GiB file) is measured by scripts/bench_gui.py, not asserted here.


def test_fingerprint_sees_head_tail_and_size_but_not_the_middle(big):
    before = file_fingerprint(big)
    poke(big, 512 * MIB, b"\x01")  # the documented blind spot
    assert file_fingerprint(big) == before
    for offset in (100, (1 << 30) - 1, 8 * MIB - 1):
        with open(big, "rb") as f:
            f.seek(offset)
            old = f.read(1)
        poke(big, offset, bytes([old[0] ^ 0xFF]))
        assert file_fingerprint(big) != before
        poke(big, offset, old)
        assert file_fingerprint(big) == before
    with open(big, "r+b") as f:
        f.truncate((1 << 30) + 1)
    try:
        assert file_fingerprint(big) != before
    finally:
        with open(big, "r+b") as f:
            f.truncate(1 << 30)


def test_missing_file_is_a_model_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="cannot read model file"):
        file_fingerprint(tmp_path / "nope.gguf")


def make_info(path: Path, layout: KVLayout | None = LAYOUT) -> ModelInfo:
    return ModelInfo(str(path), "M", path.stat().st_size, file_fingerprint(path), layout)


def test_check_model(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(os.urandom(4096))
    info = make_info(path)
    assert check_model(info, path, LAYOUT) is None
    assert check_model(info, path, None) is None
    assert check_model(make_info(path, None), path, LAYOUT) is None
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(path.read_bytes())  # a copy (new mtime, new path) still matches
    assert check_model(info, copy, LAYOUT) is None
    assert check_model(info, tmp_path / "gone.gguf", LAYOUT) == (
        f"model file not found: {tmp_path / 'gone.gguf'}")
    from dataclasses import replace
    assert check_model(info, path, replace(LAYOUT, n_ctx=8192)) == (
        "the target model's KV cache was saved with context size 4096; now 8192")
    assert "saved as f16/f16; now q8_0/f16" in check_model(info, path, replace(LAYOUT, type_k="q8_0"))
    assert "shape differs" in check_model(info, path, replace(LAYOUT, n_layer=24))
    assert check_model(info, path, LAYOUT, fingerprint_now="v1:4096:00") == (
        "the target model file changed since this conversation was saved")
    assert check_model(replace(info, fingerprint="v9:xyz"), path, LAYOUT) == (
        "the target model was saved with an unknown fingerprint kind")
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(data)  # same size, other content
    assert check_model(info, path, LAYOUT, role="draft") == (
        "the draft model file changed since this conversation was saved")
    path.write_bytes(bytes(data) + b"x")
    assert check_model(info, path, LAYOUT) == (
        "the target model file changed since this conversation was saved")


def test_kv_layout_and_its_json():
    model = SimpleNamespace(n_layer=28, n_head_kv=2, head_dim_k=128, head_dim_v=96)
    layout = kv_layout(model, 4096, "q8_0", "f16")
    assert layout == KVLayout(4096, "q8_0", "f16", 28, 256, 192)
    assert KVLayout.from_json(layout.to_json()) == layout
    for bad in ({**layout.to_json(), "n_layer": True}, {**layout.to_json(), "type_k": ""},
                {**layout.to_json(), "extra": 1}, {**layout.to_json(), "n_ctx": 0}, [], None):
        with pytest.raises(SessionError):
            KVLayout.from_json(bad)
