"""The .duet file format: round trips, damage in every region, atomic saves, versions."""

from __future__ import annotations

import array
import json
import os
import struct
import tracemalloc
from pathlib import Path

import pytest
from blake3 import blake3

import engine.conversation.session.format as fmt
from engine import localfile
from engine.conversation.session import (
    KVLayout,
    KVState,
    ModelInfo,
    SavedMessage,
    SessionMeta,
    inspect,
    read_meta,
    read_session,
    write_session,
)
from engine.conversation.session.meta import SavedCall
from engine.errors import SessionError

T0 = "2025-01-02T03:04:05+00:00"
TARGET = os.urandom(3000)
DRAFT = os.urandom(1000)


def make_meta(*, kv: bool = True, draft: bool = True) -> SessionMeta:
    layout = KVLayout(4096, "f16", "q8_0", 28, 256, 256)
    return SessionMeta(
        created=T0, saved="2025-01-02T04:00:00+00:00",
        messages=(SavedMessage("system", "Be brief.", T0), SavedMessage("user", "héllo 世界", T0),
                  SavedMessage("assistant", "hi\n", T0)),
        target=ModelInfo("/models/t.gguf", "Target 1.5B", 1234, "v1:1234:" + "ab" * 32, layout),
        draft=ModelInfo("/models/d.gguf", "Draft", 99, "v1:99:" + "cd" * 32) if draft else None,
        settings={"temperature": 0.7, "top_k": 40, "stop": ["</s>"], "spec": {"n": 4, "on": True},
                  "seed": None},
        kv_target=KVState((1, 2, 3, 151643), 4096, "f16", "q8_0") if kv else None,
        kv_draft=KVState((1, 2, 3), 4096, "f16", "f16") if kv and draft else None)


def sections(meta: SessionMeta) -> dict[str, bytes]:
    return {"kv.target": TARGET, "kv.draft": DRAFT} if meta.kv_draft else (
        {"kv.target": TARGET} if meta.kv_target else {})


def raw_file(meta_obj: object, secs: list[tuple[bytes, bytes]] = (), *, version: int = 2,
             flags: int = 0) -> bytes:
    """An independent encoder of the documented layout (so the tests check the spec)."""
    blob = json.dumps(meta_obj).encode()
    out = b"DUETSESS" + struct.pack("<HHI", version, flags, len(blob)) + blake3(blob).digest() + blob
    for name, payload in secs:
        out += bytes([len(name)]) + name + struct.pack("<Q", len(payload))
        out += blake3(payload).digest() + payload
    return out


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "chat.duet"
    meta = make_meta()
    write_session(path, meta, {"kv.target": memoryview(TARGET), "kv.draft": DRAFT})
    return path, path.read_bytes()


def regions(data: bytes) -> dict[str, tuple[int, int]]:
    """Byte ranges of every field, found by walking the documented layout."""
    meta_len = struct.unpack_from("<I", data, 12)[0]
    out = {"magic": (0, 8), "version": (8, 10), "flags": (10, 12), "meta_len": (12, 16),
           "meta_sum": (16, 48), "metadata": (48, 48 + meta_len)}
    pos = 48 + meta_len
    while pos < len(data):
        n = data[pos]
        name = data[pos + 1:pos + 1 + n].decode()
        size = struct.unpack_from("<Q", data, pos + 1 + n)[0]
        out[f"{name}/name_len"] = (pos, pos + 1)
        out[f"{name}/name"] = (pos + 1, pos + 1 + n)
        out[f"{name}/length"] = (pos + 1 + n, pos + 9 + n)
        out[f"{name}/checksum"] = (pos + 9 + n, pos + 41 + n)
        out[f"{name}/payload"] = (pos + 41 + n, pos + 41 + n + size)
        pos += 41 + n + size
    return out


def test_round_trip(saved):
    path, data = saved
    meta = make_meta()
    got = read_session(path)
    assert got.meta == meta and got.problems == []
    assert got.sections == {"kv.target": TARGET, "kv.draft": DRAFT}
    assert read_meta(path) == meta
    assert read_session(path, want=("kv.draft",)).sections == {"kv.draft": DRAFT}
    assert data[:8] == b"DUETSESS" and struct.unpack_from("<HH", data, 8) == (2, 0)
    obj = json.loads(data[48:48 + struct.unpack_from("<I", data, 12)[0]])
    assert obj["app"] == "duet" and obj["format"] == 2 and obj["kv"]["target"]["tokens"] == [1, 2, 3, 151643]
    assert obj["models"]["target"]["fingerprint"] == meta.target.fingerprint


def test_text_only_file_is_small_and_valid(tmp_path):
    path = tmp_path / "t.duet"
    meta = make_meta(kv=False)
    n = write_session(path, meta, {})
    assert n == path.stat().st_size < 2000
    got = read_session(path)
    assert got.meta == meta and got.sections == {} and got.problems == []
    assert inspect(path)["sections"] == [] and inspect(path)["problems"] == []


def test_inspect(saved):
    path, data = saved
    info = inspect(path)
    assert info["format"] == 2 and info["file_size"] == len(data) and info["messages"] == 3
    assert info["models"]["target"]["display_name"] == "Target 1.5B"
    assert info["kv"]["target"] == {"tokens": 4, "n_ctx": 4096, "type_k": "f16", "type_v": "q8_0"}
    assert [(s["name"], s["size"], s["valid"]) for s in info["sections"]] == [
        ("kv.target", len(TARGET), True), ("kv.draft", len(DRAFT), True)]
    json.dumps(info)
    damaged = bytearray(data)
    damaged[regions(data)["kv.draft/payload"][0]] ^= 1
    path.write_bytes(damaged)
    info = inspect(path)
    assert [s["valid"] for s in info["sections"]] == [True, False]
    assert "kv.draft" in info["sections"][1]["problem"] and info["problems"]


def test_typed_memoryview_payload_is_written_as_its_bytes(tmp_path):
    floats = array.array("f", [1.5, -2.0, 3.25])
    path = tmp_path / "f.duet"
    write_session(path, make_meta(draft=False), {"kv.target": memoryview(floats)})
    assert read_session(path).sections["kv.target"] == floats.tobytes()


def test_lone_surrogate_in_text_round_trips(tmp_path):
    meta = make_meta(kv=False)
    meta = SessionMeta(meta.created, meta.saved, (SavedMessage("user", "bad \ud800 byte", T0),), meta.target)
    write_session(tmp_path / "s.duet", meta, {})
    assert read_meta(tmp_path / "s.duet") == meta


@pytest.mark.parametrize("secs", [{}, {"kv.target": b"x"}, {"kv.target": b"x", "kv.draft": b"y",
                                                             "kv.other": b""}])
def test_writer_refuses_sections_that_do_not_match_the_metadata(tmp_path, secs):
    with pytest.raises(ValueError):
        write_session(tmp_path / "x.duet", make_meta(), secs)
    assert list(tmp_path.iterdir()) == []


def test_writer_refuses_bad_names_and_bad_settings(tmp_path):
    meta = make_meta(kv=False)
    for name in ("", "Kv", "a b", "é", "x" * 65):
        with pytest.raises(ValueError):
            write_session(tmp_path / "x.duet", meta, {name: b""})
    bad = SessionMeta(meta.created, meta.saved, meta.messages, meta.target,
                      settings={"t": float("nan")})
    with pytest.raises(SessionError):
        write_session(tmp_path / "x.duet", bad, {})
    assert list(tmp_path.iterdir()) == []


HEADER_REGIONS = ["magic", "version", "flags", "meta_len", "meta_sum", "metadata"]
SECTION_FIELDS = ["name_len", "name", "length", "checksum", "payload"]


def offsets(lo: int, hi: int) -> list[int]:
    return sorted({lo, hi - 1, (lo + hi) // 2, min(lo + 1, hi - 1)})


@pytest.mark.parametrize("region", HEADER_REGIONS)
@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_header_damage_raises_session_error(saved, region, mask):
    path, data = saved
    lo, hi = regions(data)[region]
    for off in offsets(lo, hi):
        bad = bytearray(data)
        bad[off] ^= mask
        path.write_bytes(bad)
        for reader in (read_session, read_meta, inspect):
            with pytest.raises(SessionError):
                reader(path)


@pytest.mark.parametrize("section", ["kv.target", "kv.draft"])
@pytest.mark.parametrize("part", SECTION_FIELDS)
@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_section_damage_drops_only_what_it_must(saved, section, part, mask):
    path, data = saved
    meta = make_meta()
    lo, hi = regions(data)[f"{section}/{part}"]
    for off in offsets(lo, hi):
        bad = bytearray(data)
        bad[off] ^= mask
        path.write_bytes(bad)
        got = read_session(path)
        assert got.meta == meta and read_meta(path) == meta
        assert section not in got.sections and got.problem(section)
        assert all("\n" not in p.text for p in got.problems)
        for name, payload in got.sections.items():  # whatever survives is exact
            assert payload == {"kv.target": TARGET, "kv.draft": DRAFT}[name]
        if section == "kv.draft" or part in ("checksum", "payload"):
            other = "kv.draft" if section == "kv.target" else "kv.target"
            assert other in got.sections
        assert inspect(path)["problems"]


def test_truncation_at_every_boundary(saved):
    path, data = saved
    r = regions(data)
    meta = make_meta()
    cuts_fatal = [0, 3, 8, 10, 12, 16, 30, 47, 48, 60, r["metadata"][1] - 1]
    for cut in cuts_fatal:
        path.write_bytes(data[:cut])
        with pytest.raises(SessionError):
            read_session(path)
        with pytest.raises(SessionError):
            read_meta(path)
    target_end = r["kv.target/payload"][1]
    expect = {r["metadata"][1]: set(), target_end: {"kv.target"}, len(data): {"kv.target", "kv.draft"}}
    for name in ("kv.target", "kv.draft"):
        for part in SECTION_FIELDS:
            lo, hi = r[f"{name}/{part}"]
            for cut in {lo + 1, (lo + hi) // 2, hi - 1}:
                expect.setdefault(cut, set() if name == "kv.target" else {"kv.target"})
    for cut, present in sorted(expect.items()):
        path.write_bytes(data[:cut])
        got = read_session(path)
        assert got.meta == meta, cut
        assert set(got.sections) == present, cut
        assert len(got.problems) >= 2 - len(present), (cut, got.problems)
        assert all(got.problem(name) for name in {"kv.target", "kv.draft"} - present), cut
        for name in present:
            assert got.sections[name] == {"kv.target": TARGET, "kv.draft": DRAFT}[name]


def test_failed_save_keeps_the_old_file(saved, monkeypatch, fail_write):
    path, data = saved

    def boom(*a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(localfile.os, "replace", boom)
    with pytest.raises(OSError):
        write_session(path, make_meta(kv=False), {})
    monkeypatch.undo()
    assert path.read_bytes() == data and sorted(p.name for p in path.parent.iterdir()) == ["chat.duet"]

    # header, metadata, section header, then the first payload
    calls = fail_write(4, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write_session(path, make_meta(), sections(make_meta()))
    assert calls[-1] == len(TARGET)
    assert path.read_bytes() == data and sorted(p.name for p in path.parent.iterdir()) == ["chat.duet"]


def test_writer_does_not_copy_payloads(tmp_path):
    payload = bytearray(os.urandom(32 * 1024 * 1024))
    tracemalloc.start()
    try:
        write_session(tmp_path / "big.duet", make_meta(draft=False), {"kv.target": memoryview(payload)})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024
    assert read_session(tmp_path / "big.duet").sections["kv.target"] == payload


def test_newer_version_asks_to_update(saved):
    path, data = saved
    path.write_bytes(data[:8] + struct.pack("<H", 7) + data[10:])
    with pytest.raises(SessionError, match=r"saved by a newer Duet \(format 7\); update Duet"):
        read_meta(path)


def v0_file() -> bytes:
    """A fake format-0 file: the same layout, an older metadata shape."""
    old = {"app": "duet", "format": 0, "when": T0,
           "history": [["user", "old question"], ["assistant", "old answer"]],
           "model": {"path": "/m.gguf", "name": "Old", "size": 5, "fingerprint": "v1:5:" + "0" * 64}}
    return raw_file(old, version=0)


def migrate_v0(obj: dict) -> dict:
    model = obj["model"]
    return {"app": "duet", "format": 1, "created": obj["when"], "saved": obj["when"],
            "messages": [{"role": r, "content": c, "time": obj["when"]} for r, c in obj["history"]],
            "settings": {}, "kv": {"target": None, "draft": None},
            "models": {"target": {"path": model["path"], "display_name": model["name"],
                                  "size": model["size"], "fingerprint": model["fingerprint"],
                                  "layout": None}, "draft": None}}


def test_old_version_goes_through_migrations(tmp_path, monkeypatch):
    path = tmp_path / "old.duet"
    path.write_bytes(v0_file())
    with pytest.raises(SessionError, match="format 0"):
        read_meta(path)
    monkeypatch.setitem(fmt.MIGRATIONS, 0, migrate_v0)
    meta = read_session(path).meta
    assert [(m.role, m.content) for m in meta.messages] == [("user", "old question"),
                                                            ("assistant", "old answer")]
    assert meta.target.display_name == "Old" and inspect(path)["format"] == 0
    monkeypatch.setitem(fmt.MIGRATIONS, 0, lambda obj: obj["missing"])
    with pytest.raises(SessionError, match="upgraded"):
        read_meta(path)


MUTATIONS = [
    lambda o: o.pop("saved"), lambda o: o.update(extra=1),
    lambda o: o.update(format=True), lambda o: o.update(app="other"),
    lambda o: o.update(created="yesterday"), lambda o: o.update(messages={}),
    lambda o: o["messages"][0].update(role="robot"),
    lambda o: o["messages"][0].update(content=5),
    lambda o: o["models"].update(target=None),
    lambda o: o["models"]["target"].update(size=True),
    lambda o: o["models"]["target"].update(size=-1),
    lambda o: o["models"]["target"]["layout"].update(n_ctx="4096"),
    lambda o: o["kv"]["target"].update(tokens=[1, "2"]),
    lambda o: o["kv"]["target"].update(tokens=[-1]),
    lambda o: o["kv"]["target"].update(n_ctx=2),
    lambda o: o["models"].update(draft=None),
    lambda o: o.update(settings=[1]),
    lambda o: o["settings"].update(x={"a": float("inf")}),
    lambda o: o.update(kv=None),
]


@pytest.mark.parametrize("mutate", MUTATIONS, ids=range(len(MUTATIONS)))
def test_wrong_metadata_shapes_are_rejected(tmp_path, mutate):
    obj = make_meta().to_json()
    assert SessionMeta.from_json(json.loads(json.dumps(obj))) == make_meta()
    mutate(obj)
    path = tmp_path / "bad.duet"
    path.write_bytes(raw_file(obj, [(b"kv.target", TARGET), (b"kv.draft", DRAFT)]))
    with pytest.raises(SessionError):
        read_session(path)


CALL = SavedCall("call_1", "get_current_time", '{"timezone": "Asia/Tokyo"}')


def tool_meta() -> SessionMeta:
    """A tool call, its result and the answer after the plain messages of make_meta."""
    meta = make_meta(kv=False)
    return SessionMeta(meta.created, meta.saved, meta.messages + (
        SavedMessage("assistant", "", T0, (CALL,)),
        SavedMessage("tool", "09:00 JST", T0, tool_call_id="call_1", name="get_current_time"),
        SavedMessage("assistant", "It is 9 am in Tokyo.", T0)), meta.target, meta.draft)


def test_tool_messages_round_trip_and_plain_ones_keep_their_shape(tmp_path):
    path = tmp_path / "tools.duet"
    write_session(path, tool_meta(), {})
    assert read_meta(path) == tool_meta() and inspect(path)["messages"] == 6
    obj = tool_meta().to_json()
    assert obj["messages"][3]["tool_calls"] == [
        {"id": "call_1", "name": "get_current_time", "arguments": '{"timezone": "Asia/Tokyo"}'}]
    assert obj["messages"][4] == {"role": "tool", "content": "09:00 JST", "time": T0,
                                  "tool_call_id": "call_1", "name": "get_current_time"}
    # a file without tool turns is written exactly as before
    assert all(set(m) == {"role", "content", "time"} for i, m in enumerate(obj["messages"])
               if i not in (3, 4))
    assert obj["format"] == 2


TOOL_MUTATIONS = [
    lambda m: m[3].update(tool_calls={}),
    lambda m: m[3].update(tool_calls=[CALL.to_json()] * 65),
    lambda m: m[3].update(tool_calls=["call_1"]),
    lambda m: m[3]["tool_calls"][0].pop("arguments"),
    lambda m: m[3]["tool_calls"][0].update(type="function"),
    lambda m: m[3]["tool_calls"][0].update(id=1),
    lambda m: m[3]["tool_calls"][0].update(name="n" * 257),
    lambda m: m[3]["tool_calls"][0].update(arguments={"timezone": "UTC"}),
    lambda m: m[3]["tool_calls"][0].update(arguments="x" * 1_000_001),
    lambda m: m[4].update(tool_call_id=None),
    lambda m: m[4].update(tool_call_id="c" * 257),
    lambda m: m[4].update(name=["get_current_time"]),
    lambda m: m[4].update(tool=True),
]


@pytest.mark.parametrize("mutate", TOOL_MUTATIONS, ids=range(len(TOOL_MUTATIONS)))
def test_wrong_tool_fields_are_rejected(tmp_path, mutate):
    obj = json.loads(json.dumps(tool_meta().to_json()))
    mutate(obj["messages"])
    path = tmp_path / "bad.duet"
    path.write_bytes(raw_file(obj))
    with pytest.raises(SessionError):
        read_meta(path)


def test_tool_fields_at_their_limits_are_accepted(tmp_path):
    obj = json.loads(json.dumps(tool_meta().to_json()))
    longest = {"id": "i" * 256, "name": "n" * 256, "arguments": "a" * 1_000_000}
    obj["messages"][3]["tool_calls"] = [longest] + [CALL.to_json()] * 63
    path = tmp_path / "big.duet"
    path.write_bytes(raw_file(obj))
    assert read_meta(path).messages[3].tool_calls[0] == SavedCall(**longest)


def test_unusual_files_give_session_errors(tmp_path):
    with pytest.raises(SessionError, match="not found"):
        read_meta(tmp_path / "none.duet")
    with pytest.raises(SessionError):
        read_session(tmp_path)
    obj = make_meta(kv=False).to_json()
    (tmp_path / "f.duet").write_bytes(raw_file(obj, flags=1))
    with pytest.raises(SessionError, match="flags"):
        read_meta(tmp_path / "f.duet")
    (tmp_path / "j.duet").write_bytes(b"DUETSESS" + struct.pack("<HHI", 1, 0, 3)
                                      + blake3(b"[[[").digest() + b"[[[")
    with pytest.raises(SessionError, match="unreadable"):
        read_meta(tmp_path / "j.duet")


def test_undeclared_and_duplicate_sections_are_reported(tmp_path):
    path = tmp_path / "d.duet"
    obj = make_meta(draft=False).to_json()
    path.write_bytes(raw_file(obj, [(b"kv.target", TARGET), (b"kv.target", b"other"),
                                    (b"kv.draft", DRAFT), (b"x.future", b"")]))
    got = read_session(path)
    assert got.sections == {"kv.target": TARGET}
    assert "twice" in got.problem("kv.target")
    assert "not described" in got.problem("kv.draft")
