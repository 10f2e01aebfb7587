"""Property tests of the .duet reader: any bytes give a parse or a SessionError, never another
exception, and memory stays bounded by the file size whatever lengths the file claims."""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import pytest
from blake3 import blake3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.conversation.session import (
    KVState,
    ModelInfo,
    SavedMessage,
    SessionMeta,
    inspect,
    read_meta,
    read_session,
    write_session,
)
from engine.errors import SessionError

PAYLOADS = {"kv.target": bytes(range(256)) * 256, "kv.draft": b"draft state " * 300}
META = SessionMeta(
    created="2025-01-01T00:00:00+00:00", saved="2025-01-01T00:00:00+00:00",
    messages=(SavedMessage("user", "hello", "2025-01-01T00:00:00+00:00"),),
    target=ModelInfo("/t.gguf", "T", 10, "v1:10:" + "0" * 64),
    draft=ModelInfo("/d.gguf", "D", 10, "v1:10:" + "1" * 64),
    kv_target=KVState((1, 2, 3), 512, "f16", "f16"), kv_draft=KVState((1, 2), 512, "f16", "f16"))
FUZZ = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("fuzz") / "valid.duet"
    write_session(path, META, PAYLOADS)
    return path.read_bytes()


@pytest.fixture(scope="module")
def spot(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "case.duet"


def check_reader(path: Path, data: bytes, *, written: dict[str, bytes] | None = None) -> None:
    """Every reader either succeeds or raises SessionError, within 2× the file size + 1 MiB;
    when the file is a damaged copy of one holding ``written``, any section it hands back is
    exactly as written."""
    path.write_bytes(data)
    for reader in (read_meta, read_session, inspect):
        tracemalloc.start()
        try:
            result = reader(path)
        except SessionError as e:
            assert str(e) and "\n" not in str(e)
            result = None
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak < 2 * len(data) + 1024 * 1024, f"{reader.__name__} peaked at {peak} bytes"
        if reader is read_session and result is not None and written is not None:
            for name, payload in result.sections.items():
                assert payload == written[name]


@FUZZ
@given(data=st.one_of(st.binary(max_size=2048),
                      st.binary(max_size=2048).map(lambda b: b"DUETSESS" + b)))
def test_random_bytes(spot, data):
    check_reader(spot, data)


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "huge", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "huge":  # a length field (or anything) that claims far more than the file has
            value = draw(st.sampled_from([2**60, 2**64 - 1, 2**32 - 1, 2**31, len(data) + 1]))
            data[at:at + 8] = struct.pack("<Q", value)
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 64))]
    return bytes(data)


def test_mutations_of_a_valid_file(valid, spot):
    @FUZZ
    @given(data=mutated(valid))
    def run(data: bytes) -> None:
        check_reader(spot, data, written=PAYLOADS)

    run()


def header(meta_blob: bytes, *, version: int = 1, meta_len: int | None = None) -> bytes:
    n = len(meta_blob) if meta_len is None else meta_len
    return (b"DUETSESS" + struct.pack("<HHI", version, 0, n) + blake3(meta_blob).digest()
            + meta_blob)


@FUZZ
@given(version=st.sampled_from([0, 1, 2, 65535]),
       meta_len=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
       name=st.one_of(st.sampled_from([b"kv.target", b"kv.draft", b"x"]), st.binary(max_size=70)),
       name_len=st.one_of(st.none(), st.integers(0, 255)),
       length=st.one_of(st.sampled_from([2**60, 2**64 - 1, 0]), st.integers(0, 2**64 - 1)),
       payload=st.binary(max_size=512),
       more=st.binary(max_size=64))
def test_files_that_claim_huge_lengths(valid, spot, version, meta_len, name, name_len, length,
                                       payload, more):
    meta_blob = valid[48:48 + struct.unpack_from("<I", valid, 12)[0]]
    n = len(name) if name_len is None else name_len
    section = bytes([n]) + name + struct.pack("<Q", length) + blake3(payload).digest() + payload
    check_reader(spot, header(meta_blob, version=version, meta_len=meta_len) + section + more)


# ─── seeded mutation pass (scripts/fuzz_hostile.py runs the long one) ─────────


def test_seeded_mutations_of_a_real_session(smol_path, tmp_path):
    """2,000 mutated copies of a real SmolLM2 session (raw damage, and metadata or KV changes
    with recomputed checksums): each is read, refused with one line, or opened (the first 100
    into a real context, where a KV state is restored only if its probe agrees)."""
    import random

    from scripts.fuzz_hostile import _valid_session, check_session, mutate_session

    valid, ctx = _valid_session(tmp_path, smol_path)
    rng = random.Random(2026)
    outcomes = {}
    try:
        for i in range(2000):
            out = check_session(tmp_path / "case.duet", mutate_session(valid, rng),
                                ctx if i < 100 else None)
            outcomes[out] = outcomes.get(out, 0) + 1
    finally:
        model = ctx.model
        ctx.close()
        model.close()
    assert outcomes.get("refused", 0) > 200 and outcomes.get("ok", 0) > 200
    assert outcomes.get("text", 0) > 0  # KV changes behind recomputed checksums were caught


def test_seeded_mutations_of_local_files(tmp_path):
    """500 mutated copies each of settings.json, verify-cost.json and recent.json: defaults (and
    the damaged file kept aside), never an exception."""
    import random

    from scripts.fuzz_hostile import local_checkers, mutate_local

    rng = random.Random(14)
    for name, content, check in local_checkers():
        for _ in range(500):
            path = tmp_path / name
            path.write_bytes(mutate_local(content, rng))
            check(path)
