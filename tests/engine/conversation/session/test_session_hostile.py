"""Session files from someone else: a KV state must belong to the text it is shown with, old
files are not trusted, and saving respects the user's files (links, modes, FIFOs, temporaries)."""

from __future__ import annotations

import json
import os
import random
import stat
import time

import pytest
from blake3 import blake3

import engine.conversation.session.format as fmt
from engine import localfile
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.conversation.session import inspect, read_meta, read_session, store, write_session
from engine.errors import SessionError
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams


def prefilled(model, secret: str) -> tuple[LlamaSequence, list[Message]]:
    """A context holding a short conversation that names the secret colour."""
    messages = [Message("system", "You are brief.", 1_700_000_000.0),
                Message("user", f"The secret colour is {secret}. Remember it.", 1_700_000_001.0),
                Message("assistant", "I will remember it.", 1_700_000_002.0)]
    ctx = LlamaSequence(model, ContextParams(n_ctx=512, n_threads=1))
    ctx.decode(chat_tokens(model, messages, add_generation_prompt=False))
    return ctx, messages


@pytest.fixture(scope="module")
def red_and_blue(smol, tmp_path_factory):
    folder = tmp_path_factory.mktemp("forge")
    files = {}
    for secret in ("red", "blue"):
        ctx, messages = prefilled(smol, secret)
        files[secret] = folder / f"{secret}.duet"
        store.save_contexts(files[secret], ctx, None, messages, settings={})
        ctx.close()
    a, b = read_meta(files["red"]), read_meta(files["blue"])
    assert len(a.kv_target.tokens) == len(b.kv_target.tokens)  # the forgery needs equal lengths
    return files


def forge(red, blue, out) -> None:
    """Header and metadata of ``red``, KV section of ``blue``, checksums recomputed."""
    meta = read_meta(red)
    kv = read_session(blue).sections["kv.target"]
    write_session(out, meta, {"kv.target": kv})


def test_the_untouched_file_restores(smol, red_and_blue):
    with LlamaSequence(smol, ContextParams(n_ctx=512, n_threads=1)) as ctx:
        opened = store.open_contexts(red_and_blue["red"], ctx)
        assert opened.restored_kv and opened.note is None
        assert len(ctx.tokens) == len(read_meta(red_and_blue["red"]).kv_target.tokens)


def test_a_file_can_be_opened_from_its_text_alone(smol, red_and_blue):
    with LlamaSequence(smol, ContextParams(n_ctx=512, n_threads=1)) as ctx:
        opened = store.open_contexts(red_and_blue["red"], ctx, use_kv=False)
        assert not opened.restored_kv and opened.note is None and ctx.tokens == []
        assert len(opened.messages) == 3


def test_a_forged_file_falls_back_to_its_text(smol, red_and_blue, tmp_path):
    forged = tmp_path / "forged.duet"
    forge(red_and_blue["red"], red_and_blue["blue"], forged)
    assert not inspect(forged)["problems"]  # every checksum agrees: only the model can tell
    with LlamaSequence(smol, ContextParams(n_ctx=512, n_threads=1)) as ctx:
        opened = store.open_contexts(forged, ctx)
        assert not opened.restored_kv and ctx.tokens == []
        assert "does not belong to the conversation's text" in opened.note
        assert "processed again" in opened.note and "\n" not in opened.note
        assert "red" in opened.messages[1].content


def test_mutated_kv_payloads_never_restore_silently_wrong(smol, red_and_blue, tmp_path):
    """Random changes to the KV bytes (checksum recomputed): each is either caught, or so small
    that the model still predicts the same next tokens (the probe agrees)."""
    meta = read_meta(red_and_blue["red"])
    kv = bytearray(read_session(red_and_blue["red"]).sections["kv.target"])
    rng = random.Random(14)
    caught = 0
    with LlamaSequence(smol, ContextParams(n_ctx=512, n_threads=1)) as ctx:
        for i in range(12):
            bad = bytearray(kv)
            start = rng.randrange(len(bad) // 2)
            for j in range(start, min(len(bad), start + 4096)):
                bad[j] = rng.randrange(256)
            path = tmp_path / f"m{i}.duet"
            write_session(path, meta, {"kv.target": bytes(bad)})
            opened = store.open_contexts(path, ctx)
            if not opened.restored_kv:
                caught += 1
                assert opened.note and ctx.tokens == []
    assert caught >= 10  # without the probe only the ones llama.cpp refuses (5 of 12) are


def v1_copy(src, dst) -> None:
    """``src`` rewritten as format 1 wrote it (no probe), KV section unchanged."""
    obj = read_meta(src).to_json()
    obj["format"] = 1
    for state in obj["kv"].values():
        if state is not None:
            del state["probe"]
    blob = json.dumps(obj).encode()
    kv = read_session(src).sections["kv.target"]
    data = fmt.HEADER.pack(fmt.MAGIC, 1, 0, len(blob), blake3(blob).digest()) + blob
    data += bytes([9]) + b"kv.target" + fmt.SECTION_TAIL.pack(len(kv), blake3(kv).digest()) + kv
    dst.write_bytes(data)


def test_a_format_1_file_opens_from_its_text(smol, red_and_blue, tmp_path, capsys):
    old = tmp_path / "old.duet"
    v1_copy(red_and_blue["red"], old)
    meta = read_meta(old)
    assert meta.kv_target.probe is None and len(meta.messages) == 3
    with LlamaSequence(smol, ContextParams(n_ctx=512, n_threads=1)) as ctx:
        opened = store.open_contexts(old, ctx)
        assert not opened.restored_kv and "older Duet" in opened.note
    from engine.cli import session as cli

    parser = __import__("argparse").ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="c"))
    args = parser.parse_args(["session", "verify", str(old), "--model", str(smol.path)])
    assert args.func(args) == 1 and "older Duet" in capsys.readouterr().out


# ─── saving respects the user's files ─────────────────────────────────────────

def test_a_symlink_is_followed_and_the_mode_kept(red_and_blue, tmp_path):
    meta = read_meta(red_and_blue["red"])
    real = tmp_path / "real.duet"
    write_session(real, meta, {"kv.target": b"x"})
    os.chmod(real, 0o640)
    link = tmp_path / "link.duet"
    link.symlink_to(real)
    write_session(link, meta, {"kv.target": b"new state"})
    assert link.is_symlink() and read_session(link).sections["kv.target"] == b"new state"
    assert read_session(real).sections["kv.target"] == b"new state"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_a_symlink_loop_and_a_fifo_are_refused(red_and_blue, tmp_path):
    meta = read_meta(red_and_blue["red"])
    loop = tmp_path / "loop.duet"
    loop.symlink_to(loop)
    with pytest.raises(SessionError):
        write_session(loop, meta, {"kv.target": b"x"})
    with pytest.raises(SessionError):
        read_meta(loop)
    fifo = tmp_path / "x.duet"
    os.mkfifo(fifo)
    for reader in (read_meta, read_session, inspect):
        with pytest.raises(SessionError, match="not a regular file"):
            reader(fifo)
    with pytest.raises(SessionError, match="not a regular file"):
        write_session(fifo, meta, {"kv.target": b"x"})
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_stale_temporaries_are_cleaned_at_the_next_save(red_and_blue, tmp_path):
    meta = read_meta(red_and_blue["red"])
    path = tmp_path / "c.duet"
    stale = tmp_path / ("c.duet" + localfile.TEMP_MARK + "abc123")
    fresh = tmp_path / ("c.duet" + localfile.TEMP_MARK + "def456")
    other = tmp_path / ("d.duet" + localfile.TEMP_MARK + "abc123")
    for f in (stale, fresh, other):
        f.write_bytes(b"half a save")
    old = time.time() - 2 * localfile.STALE_S
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    write_session(path, meta, {"kv.target": b"x"})
    assert not stale.exists() and fresh.exists() and other.exists()  # another save may be live


def test_a_different_model_is_named_as_such(red_and_blue, tmp_path):
    from engine.conversation.session.fingerprint import check_model

    info = read_meta(red_and_blue["red"]).target
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(100))
    assert "other.gguf is a different target model" in check_model(info, other, None)


def test_a_save_error_never_loses_the_turn(smol_path, tmp_path, capsys, monkeypatch):
    from engine.cli.main import main

    path = tmp_path / "g.duet"
    args = ["generate", "--model", str(smol_path), "--temperature", "0", "--max-tokens", "4",
            "--ctx", "512", "--threads", "1", "--json", "--session", str(path)]
    real = store.save_conversation
    calls = []

    def flaky(*a, **k):  # the save with the KV state fails once (the checkpoints are text only)
        calls.append(k.get("with_kv", True))
        if calls.count(True) == 1 and calls[-1]:
            raise SessionError("cannot save this conversation: the disk is full")
        return real(*a, **k)

    monkeypatch.setattr(store, "save_conversation", flaky)
    assert main(args + ["Name a colour."]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["session"]["saved"] and "disk is full" in out["session"]["save_problem"]
    # text-only checkpoints while it streams, then the full save, then its text-only fallback
    assert calls[-2:] == [True, False] and not any(calls[:-2])
    assert [m.role for m in read_meta(path).messages] == ["user", "assistant"]

    def broken(*a, **k):
        raise SessionError("cannot save the conversation: read-only file system")

    monkeypatch.setattr(store, "save_conversation", broken)
    assert main(args + ["And a fruit?"]) == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["text"] and not out["session"]["saved"]  # the reply is still given
    assert "the reply was not saved" in captured.err and captured.err.count("\n") == 1


def test_what_a_session_may_hold_is_bounded(red_and_blue, tmp_path, monkeypatch):
    from engine.conversation.session import meta as meta_mod

    obj = read_meta(red_and_blue["red"]).to_json()
    monkeypatch.setattr(meta_mod, "MAX_MESSAGE_CHARS", 20)
    with pytest.raises(SessionError, match="longer than 20 characters"):
        meta_mod.SessionMeta.from_json(obj)
    monkeypatch.setattr(meta_mod, "MAX_MESSAGE_CHARS", 10**6)
    monkeypatch.setattr(meta_mod, "MAX_MESSAGES", 2)
    with pytest.raises(SessionError, match="more than 2 messages"):
        meta_mod.SessionMeta.from_json(obj)
    monkeypatch.setattr(meta_mod, "MAX_MESSAGES", 10)
    monkeypatch.setattr(meta_mod, "MAX_TEXT_CHARS", 30)
    with pytest.raises(SessionError, match="more than 30 characters"):
        meta_mod.SessionMeta.from_json(obj)
