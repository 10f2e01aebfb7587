"""Malformed and hostile exports: each bad record is one line naming it, the good ones beside
it are imported, and nothing imported before is lost or changed. Hypothesis mutates the samples
and writes arbitrary JSON; no traceback may come out of an import."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA, saved
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.conversation.importers import import_files
from engine.conversation.importers.records import Records
from engine.conversation.importers.run import signatures
from engine.conversation.session.format import read_meta
from engine.conversation.session.meta import MAX_MESSAGES
from engine.conversation.session.store import from_saved
from engine.conversation.store import tree_from_json
from engine.conversation.tree import Node


def chatgpt(title: str, chain: int = 2, **extra: Any) -> dict[str, Any]:
    """A ChatGPT conversation: a root and ``chain`` messages, user and assistant in turn."""
    mapping: dict[str, Any] = {"r": {"id": "r", "message": None, "parent": None, "children": ["m0"]}}
    for i in range(chain):
        mapping[f"m{i}"] = {
            "id": f"m{i}", "parent": "r" if i == 0 else f"m{i - 1}",
            "children": [f"m{i + 1}"] if i + 1 < chain else [],
            "message": {"author": {"role": ("user", "assistant")[i % 2]}, "create_time": 1.7e9 + i,
                        "content": {"content_type": "text", "parts": [f"{title} {i}"]}}}
    return {"title": title, "id": title, "create_time": 1.7e9, "update_time": 1.7e9 + chain,
            "mapping": mapping, "current_node": f"m{chain - 1}", **extra}


@pytest.fixture
def before(home):
    """The samples imported first: what no later import may lose or change."""
    assert len(import_files(sorted(DATA.glob("*.json"))).added) == 8
    return {p: p.read_bytes() for p in home.glob("*.duet")}


def intact(home: Path, before: dict[Path, bytes]) -> bool:
    return all(p.exists() and p.read_bytes() == data for p, data in before.items())


def nothing_lost(before: dict[Path, Node]) -> bool:
    """Every file imported before is there, and holds every message it held (an export of the
    same conversation that holds them all may have replaced it)."""
    return all(p.exists() and signatures(root) <= signatures(tree_of(p))
               for p, root in before.items())


def tree_of(path: Path) -> Node:
    meta = read_meta(path)
    root = tree_from_json(meta.settings["tree"], [from_saved(m) for m in meta.messages])
    assert root is not None
    return root


def write(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


def test_bad_json_is_one_line_and_the_records_before_it_are_kept(home, before, tmp_path):
    good = json.dumps([chatgpt("alpha"), chatgpt("beta")])
    bad = tmp_path / "conversations.json"
    bad.write_text(good[:-1] + ', {"title": "gamma", "mapping": {"x": ', encoding="utf-8")
    report = import_files([bad])
    assert len(report.added) == 2
    [line] = report.failed
    assert line.startswith("conversations.json: record 2: it is not valid JSON") and "\n" not in line
    for text, why in [("", "empty"), ("{", "valid JSON"), ("[1, 2", "not a conversation"),
                      ("\xff\xfe", "UTF-8"), ('{"a": 1} trailing', "more after")]:
        bad.write_bytes(text.encode("latin-1"))
        report = import_files([bad])
        assert report.added == [] and len(report.failed) >= 1 and why in report.failed[0], text
    assert intact(home, before) and len(list(home.glob("*.duet"))) == 10
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert import_files([fifo, tmp_path]).failed == [
        "fifo.json: fifo.json is not a regular file",
        f"{tmp_path.name}: {tmp_path.name} is not a regular file"]


def test_a_flood_of_bad_records_keeps_a_thousand_lines(home, tmp_path):
    (tmp_path / "flood.json").write_text("[" + ",".join(["{}"] * 5000) + "]")
    report = import_files([tmp_path / "flood.json"])
    assert report.n_failed == 5000 and len(report.failed) == 1000


def test_a_cycle_in_mapping(home, before, tmp_path):
    conv = chatgpt("loop", 4)
    conv["mapping"]["m1"]["parent"] = "m3"  # m1 → m2 → m3 → m1, none of them under the root
    report = import_files([write(tmp_path / "c.json", [conv, chatgpt("fine")])])
    assert [p.stem for p in report.added] == ["fine"]
    assert report.failed == ['c.json: record 0 ("loop"): its message tree has a cycle '
                             '(3 messages no first message leads to)']
    conv["mapping"]["m0"]["parent"] = "m0"  # its own parent: a first message
    conv["mapping"]["m1"]["parent"] = "m0"
    assert len(import_files([write(tmp_path / "c.json", [conv])]).added) == 1
    assert intact(home, before)


def test_deep_chains_import_without_recursion_up_to_what_a_duet_file_holds(home, tmp_path):
    deep = chatgpt("deep", 20_000)  # twenty times Python's recursion limit
    report = import_files([write(tmp_path / "deep.json", [deep])])
    assert report.failed == [] and len(report.added) == 1
    chat = saved(home)["deep"]
    assert len(chat.conv.turns) == 20_000 and chat.shown[-1] == ("assistant", "deep 19999")
    deeper = chatgpt("deeper", MAX_MESSAGES + 1)  # 100,001 messages: refused before reading them
    [line] = import_files([write(tmp_path / "deeper.json", [deeper, chatgpt("after")])]).failed
    assert line == 'deeper.json: record 0 ("deeper"): it has more than 100,000 messages'
    assert (home / "after.duet").exists()


def test_json_nested_past_the_decoder(home, before, tmp_path):
    bad = tmp_path / "nest.json"
    bad.write_text('[{"title": "ok", "mapping": {}}, ' + "[" * 100_000 + "]" * 100_000 + "]")
    report = import_files([bad])
    assert report.failed == ["nest.json: record 1: it is nested too deeply"]
    assert intact(home, before)


@pytest.mark.parametrize("change, why", [
    (lambda c: c["mapping"]["m1"]["message"]["author"].update(role="wizard"), "unknown role 'wizard'"),
    (lambda c: c.update(mapping=[1, 2]), "not a conversation"),
    (lambda c: c["mapping"]["m0"]["message"]["content"].update(parts=[3]), "parts holds a int"),
    (lambda c: c["mapping"]["m0"]["message"].update(create_time="yesterday"), "create_time is not a time"),
    (lambda c: c["mapping"]["m0"]["message"].update(create_time=float("nan")), "not valid JSON"),
    (lambda c: c["mapping"]["m0"].update(children="m1"), "children is not a list"),
    (lambda c: c["mapping"]["m0"]["message"].update(author=None), "author is not a dict"),
    (lambda c: c.update(title=["a"]), "title is not a str"),
])
def test_wrong_types_and_unknown_roles(home, before, tmp_path, change, why):
    conv = chatgpt("bad")
    change(conv)
    text = json.dumps([conv, chatgpt("good")]).replace("NaN", "nan")
    (tmp_path / "w.json").write_text(text)
    report = import_files([tmp_path / "w.json"])
    assert len(report.failed) == 1 and why in report.failed[0] and "record 0" in report.failed[0]
    assert [p.stem for p in report.added] == (["good"] if "JSON" not in why else [])
    assert intact(home, before)


def test_each_format_refuses_wrong_types_in_one_line(home, tmp_path):
    hostile = [
        {"chat_messages": [{"sender": "robot", "text": "hi"}]},
        {"chat_messages": [{"sender": "human", "text": 5}]},
        {"chat": {"history": {"messages": {"a": {"role": "user", "content": 7}}}}},
        {"chat": {"history": {"messages": {"a": {"role": "bot", "content": "x"}}}}},
        {"messages": [{"versions": [{"role": "user", "content": "no list"}]}]},
        {"messages": [{"versions": [{"role": "robot", "content": []}]}]},
        {"conv": {"id": 1}, "messages": [{"id": {}, "role": "user"}]},
        {"conv": {"id": 1}, "messages": [{"id": "a", "role": "user", "extra": "x"}]},
        {"app": "duet", "messages": [{"role": "user", "content": None, "time": 0}]},
        {"app": "duet", "messages": [{"role": "ghost", "content": "", "time": 0}]},
    ]
    report = import_files([write(tmp_path / "h.json", [h]) for h in hostile] + [tmp_path / "none.json"])
    assert report.added == [] and len(report.failed) == len(hostile) + 1
    assert all("\n" not in line and len(line) < 400 for line in report.failed)
    assert report.failed[-1].startswith("none.json: cannot read none.json")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
SAMPLES = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(DATA.glob("*.json"))]


def paths_in(obj: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every value inside ``obj`` (iteratively)."""
    out, stack = [], [obj]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            stack.append(v)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(sample=st.sampled_from(range(len(SAMPLES))), data=st.data())
def test_fuzzed_samples_never_raise_and_lose_nothing(tmp_path_factory, monkeypatch, sample, data):
    home = tmp_path_factory.mktemp("fuzz")
    monkeypatch.setenv("DUET_HOME", str(home))
    folder = home / "conversations"
    first = import_files([DATA / "claude-conversations.json"], folder)
    kept = {p: tree_of(p) for p in folder.glob("*.duet")}
    obj = json.loads(json.dumps(SAMPLES[sample]))
    spots = paths_in(obj)
    for _ in range(data.draw(st.integers(1, 4))):
        node, key = data.draw(st.sampled_from(spots))
        node[key] = data.draw(json_values)
    path = tmp_path_factory.mktemp("in") / "fuzz.json"
    raw = json.dumps(obj, ensure_ascii=False).encode("utf-8")
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(raw)))
        raw = raw[:cut] + data.draw(st.binary(max_size=8))
    path.write_bytes(raw)
    report = import_files([path], folder)
    assert all("\n" not in line and "Traceback" not in line for line in report.failed)
    assert not any("unexpected content" in line for line in report.failed), report.failed
    assert nothing_lost(kept) and len(first.added) == 2
    saved(folder)  # whatever was imported opens as the window opens it


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=json_values)
def test_arbitrary_json_never_raises(tmp_path_factory, value):
    folder = tmp_path_factory.mktemp("any")
    path = folder / "any.json"
    path.write_text(json.dumps(value), encoding="utf-8")
    report = import_files([path], folder / "out", index=_NoIndex())  # type: ignore[arg-type]
    assert len(report.added) + len(report.failed) >= 1 or value == []


class _NoIndex:
    def update_many(self, files: list[Path]) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_large_export_is_read_one_record_at_a_time(tmp_path):
    """About 30 MB of conversations: reading them holds one record, not the file."""
    one = json.dumps(chatgpt("x" * 1000, 20))
    path = tmp_path / "conversations.json"
    with path.open("w") as f:
        f.write("[\n" + ",\n".join(one for _ in range(1000)) + "\n]")
    size = path.stat().st_size
    assert size > 25e6
    tracemalloc.start()
    try:
        records = Records(path)
        n = sum(1 for _ in records)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == 1000 and records.done == size
    assert peak < size / 5, f"{peak / 1e6:.1f} MB held to read {size / 1e6:.1f} MB"
