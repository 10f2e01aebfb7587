"""Saving and reopening conversations with real models: KV round trips (target and draft),
fallback to text on every kind of mismatch or damage, atomic saves, text-only files."""

from __future__ import annotations

import os
import shutil
import struct
import time
from pathlib import Path

import pytest

from engine.chat.fit import chat_tokens
from engine.chat.messages import Message, ToolCall
from engine.cli.main import main
from engine.conversation.session import inspect, read_meta, store
from engine.decode.sampling import SamplingParams
from engine.errors import SessionError
from engine.events import Done
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model, ModelSpec
from engine.runtime.generate import Generator
from engine.runtime.runtime import Runtime, RuntimeConfig

GREEDY = SamplingParams(temperature=0, max_tokens=12)
SETTINGS = {"sampling": {"temperature": 0}, "autosave": True}


def reply(gen: Generator, messages: list[Message]) -> Done:
    done = [e for e in gen.chat(messages, GREEDY) if isinstance(e, Done)]
    assert len(done) == 1
    return done[0]


def converse(gen: Generator, turns: list[str], messages: list[Message] | None = None
             ) -> list[Message]:
    """Each user turn of ``turns`` and the model's greedy reply, appended to ``messages``."""
    messages = list(messages or [Message("system", "You are brief.", 1_700_000_000.25)])
    for text in turns:
        messages.append(Message("user", text, time.time()))
        messages.append(Message("assistant", reply(gen, messages).text, time.time()))
    return messages


def ctx_on(model: Model, n_ctx: int = 1024, kv: str = "f16") -> LlamaSequence:
    # one thread: on a busy 2-core machine two spinning threads are many times slower
    return LlamaSequence(model, ContextParams(n_ctx=n_ctx, n_threads=1, type_k=kv, type_v=kv))


@pytest.fixture
def chat(smol, tmp_path):
    """A 2-turn conversation on SmolLM2, saved with its KV state: (path, ctx, messages)."""
    ctx = ctx_on(smol)
    messages = converse(Generator.alone(ctx), ["Name a colour.", "And a fruit?"])
    path = tmp_path / "chat.duet"
    store.save_contexts(path, ctx, None, messages, settings=SETTINGS)
    yield path, ctx, messages
    ctx.close()


def section_payload(data: bytes, name: str) -> tuple[int, int]:
    """Byte range of section ``name``'s payload, by walking the documented layout."""
    pos = 48 + struct.unpack_from("<I", data, 12)[0]
    while pos < len(data):
        n = data[pos]
        size = struct.unpack_from("<Q", data, pos + 1 + n)[0]
        start = pos + 41 + n
        if data[pos + 1:pos + 1 + n].decode() == name:
            return start, start + size
        pos = start + size
    raise KeyError(name)


def same_text(a: list[Message], b: list[Message]) -> bool:
    return [(m.role, m.content) for m in a] == [(m.role, m.content) for m in b] and all(
        abs(x.time - y.time) < 1e-5 for x, y in zip(a, b))


# ─── round trips ──────────────────────────────────────────────────────────────


def test_round_trip_through_runtimes_needs_no_history_prefill(smol_path, tmp_path):
    config = RuntimeConfig(target=ModelSpec(smol_path), context=ContextParams(n_ctx=1024, n_threads=1))
    path = tmp_path / "rt.duet"
    with Runtime(config) as a:
        messages = converse(a.generator, ["Name a colour.", "And a fruit?"])
        report = store.save_conversation(path, a, messages, settings=SETTINGS)
        saved_tokens = list(a.ctx.tokens)
        assert report.with_kv and report.n_tokens == len(saved_tokens) > 20
        assert report.bytes == path.stat().st_size
        assert report.bytes_per_token == pytest.approx(report.bytes / report.n_tokens)
        # ≈ the KV bytes per token (f16) plus a few KB for the whole file
        kv = a.target.kv_bytes_per_token(2.0) * len(saved_tokens)
        assert kv < report.bytes < kv + 16_384
        nxt = messages + [Message("user", "And an animal?", time.time())]
        want = reply(a.generator, nxt)
        with Runtime(config) as b:
            opened = store.open_conversation(path, b)
            assert opened.restored_kv and opened.note is None
            assert same_text(opened.messages, messages) and opened.settings == SETTINGS
            assert opened.model_path == smol_path.absolute() and opened.draft_path is None
            assert b.ctx.tokens == saved_tokens and b.ctx.kv_pos_max() == len(saved_tokens) - 1
            got = reply(b.generator, nxt)
    assert got.token_ids == want.token_ids and got.text == want.text
    # No prefill of the history: the restored cache is reused exactly as far as the uninterrupted
    # one, at least up to the last reply (whose re-tokenized text may split differently from the
    # tokens the model generated).
    assert got.stats.n_cached_tokens == want.stats.n_cached_tokens
    with Runtime(config) as c:
        before_last_reply = len(chat_tokens(c.target, messages[:-1]))
    assert before_last_reply <= got.stats.n_cached_tokens <= len(saved_tokens)


def test_round_trip_of_target_and_draft_qwen(qwen_target, qwen_draft, tmp_path):
    path = tmp_path / "qwen.duet"
    with ctx_on(qwen_target, 512) as t, ctx_on(qwen_draft, 512) as d:
        messages = converse(Generator.alone(t), ["Write a one-line Python hello world."])
        reply(Generator.alone(d), messages[:-1])  # the draft context follows the same conversation
        report = store.save_contexts(path, t, d, messages, settings={})
        info = inspect(path)
        assert [s["name"] for s in info["sections"]] == ["kv.target", "kv.draft"]
        assert info["kv"]["draft"]["tokens"] == len(d.tokens) and report.n_tokens == len(t.tokens)
        nxt = messages + [Message("user", "Now in C.", time.time())]
        want_t, want_d = reply(Generator.alone(t), nxt), reply(Generator.alone(d), nxt)
        with ctx_on(qwen_target, 512) as t2, ctx_on(qwen_draft, 512) as d2:
            opened = store.open_contexts(path, t2, d2)
            assert opened.restored_kv and opened.draft_restored and opened.note is None
            got_t, got_d = reply(Generator.alone(t2), nxt), reply(Generator.alone(d2), nxt)
    assert got_t.token_ids == want_t.token_ids and got_d.token_ids == want_d.token_ids
    assert got_t.stats.n_cached_tokens == want_t.stats.n_cached_tokens > 20
    assert got_d.stats.n_cached_tokens == want_d.stats.n_cached_tokens > 10


def test_tool_turns_round_trip_with_their_kv_state(smol, tmp_path, capsys):
    """A tool call, its result and the answer: saved with the KV state, reopened as they were
    (calls, ids, names), and the next reply reuses the restored cache."""
    call = ToolCall("call_1", "get_current_time", '{"timezone": "Asia/Tokyo"}')
    messages = [Message("system", "You are brief.", 1_700_000_000.25),
                Message("user", "What time is it in Tokyo?", time.time()),
                Message("assistant", "", time.time(), tool_calls=(call,)),
                Message("tool", '{"time": "09:00"}', time.time(), tool_call_id="call_1",
                        name="get_current_time")]
    path = tmp_path / "tools.duet"
    with ctx_on(smol) as ctx:
        messages.append(Message("assistant", reply(Generator.alone(ctx), messages).text, time.time()))
        report = store.save_contexts(path, ctx, None, messages, settings=SETTINGS)
        saved_tokens = list(ctx.tokens)
        nxt = messages + [Message("user", "And in Paris?", time.time())]
        want = reply(Generator.alone(ctx), nxt)
    assert report.with_kv
    with ctx_on(smol) as fresh:
        opened = store.open_contexts(path, fresh)
        assert opened.restored_kv and opened.note is None and fresh.tokens == saved_tokens
        assert opened.messages == messages and same_text(opened.messages, messages)
        assert opened.messages[2].tool_calls == (call,)
        assert (opened.messages[3].tool_call_id, opened.messages[3].name) == (
            "call_1", "get_current_time")
        got = reply(Generator.alone(fresh), nxt)
    assert got.token_ids == want.token_ids
    assert got.stats.n_cached_tokens == want.stats.n_cached_tokens > 20
    assert main(["session", "inspect", str(path)]) == 0
    assert "5 messages" in capsys.readouterr().out


# ─── fallbacks to text ────────────────────────────────────────────────────────


def assert_text_fallback(path: Path, ctx: LlamaSequence, messages: list[Message], *words: str) -> None:
    """Opening gives the text and a one-line note, not the KV state; the next reply works."""
    opened = store.open_contexts(path, ctx)
    assert not opened.restored_kv and same_text(opened.messages, messages)
    assert opened.note and "\n" not in opened.note and "processed again" in opened.note
    for word in words:
        assert word in opened.note
    done = reply(Generator.alone(ctx), opened.messages + [Message("user", "Thanks!", time.time())])
    assert done.stats.n_cached_tokens == 0 and done.token_ids


def test_changed_or_missing_model_file_falls_back_to_text(smol_path, tmp_path):
    copy = tmp_path / "model.gguf"
    shutil.copyfile(smol_path, copy)
    with Model(copy) as model, ctx_on(model) as ctx:
        messages = converse(Generator.alone(ctx), ["Name a colour."])
        path = tmp_path / "c.duet"
        store.save_contexts(path, ctx, None, messages, settings={})
        changed = bytearray(copy.read_bytes())
        changed[-1000] ^= 0x01  # same size, one byte in the fingerprinted tail
        (tmp_path / "new.gguf").write_bytes(changed)
        os.replace(tmp_path / "new.gguf", copy)  # the loaded model keeps the old inode
        with ctx_on(model) as fresh:
            assert_text_fallback(path, fresh, messages, "target model file changed")
        copy.unlink()
        with ctx_on(model) as fresh:
            assert_text_fallback(path, fresh, messages, "not found")
        opened = store.open_conversation(path, None)
        assert not opened.restored_kv and "missing" in opened.note
        # saving while the model's file is gone keeps the text (no KV state nobody can vouch for)
        report = store.save_contexts(path, ctx, None, messages, settings={})
        assert not report.with_kv and read_meta(path).target.fingerprint == "unknown"
        assert same_text(store.open_conversation(path, None).messages, messages)


@pytest.mark.parametrize("n_ctx,kv,word", [(2048, "f16", "context size 1024"),
                                           (1024, "q8_0", "f16/f16")])
def test_other_context_size_or_kv_type_falls_back_to_text(smol, chat, n_ctx, kv, word):
    path, _, messages = chat
    with ctx_on(smol, n_ctx, kv) as other:
        assert_text_fallback(path, other, messages, word)


def test_damaged_section_falls_back_to_text(smol, chat):
    path, _, messages = chat
    data = bytearray(path.read_bytes())
    lo, hi = section_payload(data, "kv.target")
    data[(lo + hi) // 2] ^= 0x10
    path.write_bytes(data)
    with ctx_on(smol) as fresh:
        assert_text_fallback(path, fresh, messages, "damaged")


def test_truncated_file_recovers_the_text_or_says_why(smol, chat):
    path, _, messages = chat
    data = path.read_bytes()
    lo, hi = section_payload(data, "kv.target")
    path.write_bytes(data[:(lo + hi) // 2])
    with ctx_on(smol) as fresh:
        assert_text_fallback(path, fresh, messages, "truncated")
    path.write_bytes(data[:lo - 20])  # metadata intact, section header cut
    with ctx_on(smol) as fresh:
        assert_text_fallback(path, fresh, messages)
    path.write_bytes(data[:200])  # the metadata itself is cut
    with ctx_on(smol) as fresh, pytest.raises(SessionError, match="truncated"):
        store.open_contexts(path, fresh)


def test_a_bad_draft_section_does_not_stop_the_target(smol, tmp_path):
    with ctx_on(smol) as t, ctx_on(smol, 512) as d:
        messages = converse(Generator.alone(t), ["Name a colour."])
        reply(Generator.alone(d), messages[:-1])
        path = tmp_path / "d.duet"
        store.save_contexts(path, t, d, messages, settings={})
        data = bytearray(path.read_bytes())
        data[section_payload(data, "kv.draft")[0] + 5] ^= 0xFF
        path.write_bytes(data)
        with ctx_on(smol) as t2, ctx_on(smol, 512) as d2:
            opened = store.open_contexts(path, t2, d2)
            assert opened.restored_kv and t2.tokens == t.tokens
            assert not opened.draft_restored and d2.tokens == []
            assert "draft" in opened.note and "damaged" in opened.note
        with ctx_on(smol) as t3, ctx_on(smol, 1024) as d3:  # other draft context size
            opened = store.open_contexts(path, t3, d3)
            assert opened.restored_kv and not opened.draft_restored and "draft" in opened.note


def test_a_file_replaced_while_opening_falls_back_to_its_text(smol, chat, monkeypatch):
    path, ctx, messages = chat
    real = store.read_session

    def replaced_meanwhile(p, *, want):  # another save lands between the two reads
        store.save_contexts(path, ctx, None, messages[:2], settings={}, with_kv=False)
        return real(p, want=want)

    monkeypatch.setattr(store, "read_session", replaced_meanwhile)
    with ctx_on(smol) as fresh:
        opened = store.open_contexts(path, fresh)
        assert not opened.restored_kv and fresh.tokens == [] and "changed" in opened.note
        assert same_text(opened.messages, messages[:2])  # the text of the file as it now is


# ─── saving ───────────────────────────────────────────────────────────────────


def test_failed_save_leaves_the_old_file_intact(chat, fail_write):
    path, ctx, messages = chat
    before = path.read_bytes()
    # header, metadata, section header, then the KV payload
    calls = fail_write(4, OSError(28, "No space left on device"))
    more = messages + [Message("user", "One more?", time.time())]
    with pytest.raises(SessionError, match="No space left"):
        store.save_contexts(path, ctx, None, more, settings={})
    assert len(calls) == 4
    assert path.read_bytes() == before and [p.name for p in path.parent.iterdir()] == [path.name]
    with pytest.raises(SessionError):  # settings that are not plain JSON
        store.save_contexts(path, ctx, None, messages, settings={"x": {1, 2}})
    assert path.read_bytes() == before


def test_text_only_save_is_small_and_reopens_without_a_note(smol, chat, tmp_path):
    _, ctx, messages = chat
    path = tmp_path / "text.duet"
    report = store.save_contexts(path, ctx, None, messages, settings=SETTINGS, with_kv=False)
    text = sum(len(m.content.encode()) for m in messages)
    assert not report.with_kv and report.bytes == path.stat().st_size < 2048 + text
    with ctx_on(smol) as fresh:
        opened = store.open_contexts(path, fresh)
        assert not opened.restored_kv and opened.note is None and fresh.tokens == []
        assert same_text(opened.messages, messages) and opened.settings == SETTINGS


def test_resave_keeps_the_creation_time_and_empty_context_saves_text(smol, chat, monkeypatch):
    path, ctx, messages = chat
    created = read_meta(path).created
    monkeypatch.setattr(store, "utc_now_iso", lambda: "2999-01-01T00:00:00+00:00")  # later
    store.save_contexts(path, ctx, None, messages, settings={})
    assert read_meta(path).created == created and read_meta(path).saved > created
    with ctx_on(smol) as empty:
        report = store.save_contexts(path, empty, None, messages[:1], settings={})
    assert not report.with_kv and report.bytes_per_token == 0.0


def test_fingerprints_are_cached_per_path_size_and_mtime(tmp_path, monkeypatch):
    copy = tmp_path / "m.bin"
    copy.write_bytes(b"GGUF" + bytes(1000))
    calls = []
    real = store.file_fingerprint
    monkeypatch.setattr(store, "file_fingerprint", lambda p: calls.append(p) or real(p))
    first = store.model_fingerprint(copy)
    assert store.model_fingerprint(copy) == first and len(calls) == 1
    copy.write_bytes(b"GGUF" + bytes(999) + b"\1")
    os.utime(copy, ns=(1, 1))
    assert store.model_fingerprint(copy) != first and len(calls) == 2


def test_message_times_round_trip():
    for t in (0.0, 1_700_000_000.123456, time.time()):
        m = Message("user", "x", t)
        assert store.from_saved(store.to_saved(m)).time == pytest.approx(t, abs=1e-6)
    assert store.to_saved(Message("user", "x", 0.0)).time.startswith("1970-01-01T00:00:00")
    assert store.to_saved(Message("user", "x", 1e300)).time.startswith("1970-01-01")
