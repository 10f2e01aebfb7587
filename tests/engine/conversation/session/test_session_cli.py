"""``duet-cli session inspect|verify``, ``generate --session`` and ``bench session``, in-process."""

from __future__ import annotations

import json
import struct
import time

import pytest

from bench import session as bench
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.cli.main import main
from engine.conversation.session import read_meta, store
from engine.decode.sampling import SamplingParams
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.runtime.generate import Generator


@pytest.fixture
def saved(smol, tmp_path):
    """A short conversation on SmolLM2 saved with its KV state (n_ctx 1024, f16)."""
    with LlamaSequence(smol, ContextParams(n_ctx=1024, n_threads=1)) as ctx:
        messages = [Message("user", "Say hi.", time.time())]
        for _ in Generator.alone(ctx).chat(messages, SamplingParams(temperature=0, max_tokens=6)):
            pass
        messages.append(Message("assistant", "Hi!", time.time()))
        path = tmp_path / "s.duet"
        store.save_contexts(path, ctx, None, messages, settings={})
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect_good_file(saved, capsys):
    code, out, err = run_cli(capsys, "session", "inspect", saved)
    assert code == 0 and err == ""
    assert "format 2" in out and "kv.target" in out and " ok" in out and "bytes per token" in out
    assert "n_ctx 1024, f16/f16" in out
    code, out, _ = run_cli(capsys, "session", "inspect", saved, "--json")
    info = json.loads(out)
    assert code == 0 and info["problems"] == [] and info["messages"] == 2
    assert [(s["name"], s["valid"]) for s in info["sections"]] == [("kv.target", True)]
    assert info["bytes_per_token"] == pytest.approx(info["file_size"] / info["kv"]["target"]["tokens"],
                                                    abs=0.1)


def test_inspect_damaged_files(saved, capsys):
    data = bytearray(saved.read_bytes())
    data[-10] ^= 0xFF  # in the KV payload: reported, exit 1
    saved.write_bytes(data)
    code, out, _ = run_cli(capsys, "session", "inspect", saved)
    assert code == 1 and "DAMAGED" in out and "kv.target" in out
    meta_len = struct.unpack_from("<I", data, 12)[0]
    data[48 + meta_len // 2] ^= 0xFF  # in the metadata: nothing usable, one-line error
    saved.write_bytes(data)
    code, out, err = run_cli(capsys, "session", "inspect", saved)
    assert code == 1 and out == ""
    assert err.startswith("duet-cli: error: ") and err.count("\n") == 1 and "damaged" in err
    code, _, err = run_cli(capsys, "session", "inspect", saved.with_name("none.duet"))
    assert code == 1 and "not found" in err


def test_verify_ok_and_mismatches(saved, smol_path, tmp_path, capsys):
    code, out, _ = run_cli(capsys, "session", "verify", saved, "--model", smol_path)
    assert code == 0 and "OK" in out and "matches" in out
    code, out, _ = run_cli(capsys, "session", "verify", saved, "--model", smol_path,
                           "--ctx", "1024", "--kv-type", "f16")
    assert code == 0 and "OK" in out
    code, out, _ = run_cli(capsys, "session", "verify", saved, "--model", smol_path,
                           "--ctx", "2048")
    assert code == 1 and "context size 1024; now 2048" in out
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(100))
    code, out, _ = run_cli(capsys, "session", "verify", saved, "--model", other)
    assert code == 1 and "different target model" in out
    code, out, _ = run_cli(capsys, "session", "verify", saved, "--model", tmp_path / "gone.gguf")
    assert code == 1 and "not found" in out
    code, out, _ = run_cli(capsys, "session", "verify", saved, "--model", smol_path,
                           "--draft", smol_path)
    assert code == 1 and "no draft model" in out
    data = bytearray(saved.read_bytes())
    data[-10] ^= 0xFF
    saved.write_bytes(data)
    code, out, _ = run_cli(capsys, "session", "verify", saved, "--model", smol_path)
    assert code == 1 and "damaged" in out


def test_generate_session_twice_restores_and_appends(smol, smol_path, tmp_path, capsys):
    path = tmp_path / "g.duet"
    base = ("generate", "--model", smol_path, "--temperature", "0", "--max-tokens", "8",
            "--ctx", "1024", "--threads", "1", "--json", "--session", path)
    code, out, _ = run_cli(capsys, *base, "--system", "Be brief.", "Name a colour.")
    first = json.loads(out)
    assert code == 0 and first["session"] == {
        "restored_kv": False, "note": None, "path": str(path), "bytes": path.stat().st_size,
        "n_tokens": first["session"]["n_tokens"], "saved": True, "save_problem": None}
    assert first["n_cached_tokens"] == 0 and first["session"]["n_tokens"] > 10
    code, out, _ = run_cli(capsys, *base, "And a fruit?")
    second = json.loads(out)
    assert code == 0 and second["session"]["restored_kv"] and second["session"]["note"] is None
    messages = read_meta(path).messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[2].content == first["text"] and messages[4].content == second["text"]
    # only the new turn was processed: every saved token came back from the KV state
    assert second["n_cached_tokens"] == first["session"]["n_tokens"]
    assert second["n_prompt_tokens"] - second["n_cached_tokens"] < 20
    code, out, err = run_cli(capsys, *base[:-2], "--session", path, "Thanks")  # text mode
    assert code == 0 and out.strip() and err == ""


def test_generate_session_with_a_damaged_file_notes_the_fallback(smol_path, tmp_path, capsys):
    path = tmp_path / "g.duet"
    base = ("generate", "--model", smol_path, "--temperature", "0", "--max-tokens", "4",
            "--ctx", "1024", "--threads", "1", "--session", path)
    assert run_cli(capsys, *base, "Name a colour.")[0] == 0
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(data)
    code, out, err = run_cli(capsys, *base, "And a fruit?")
    assert code == 0 and out.strip()
    assert err.startswith("duet-cli: note: ") and "damaged" in err and err.count("\n") == 1
    assert len(read_meta(path).messages) == 4


def test_bench_session_small_run(smol, tmp_path, capsys):
    messages = bench.conversation(smol, 400)
    n = len(chat_tokens(smol, messages))
    assert 360 <= n <= 400 and messages[-1].content == bench.QUESTION
    assert [m.role for m in messages[:4]] == ["user", "assistant", "user", "assistant"]
    code = bench.main(["--model", "test", "--tokens", "300", "--ladder", "150,300",
                       "--repeats", "1", "--kv-type", "f16", "--check-tokens", "4",
                       "--threads", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "session.json").read_text())
    assert code == 0 and "| f16 |" in out and (tmp_path / "session.md").read_text() == out[:-1]
    kv = result["kv"][0]
    assert kv["identical_tokens"] and kv["compared_tokens"] == 4
    assert kv["new_tokens_after_restore"] < 30 < kv["history_tokens"]
    assert kv["file_bytes"] == kv["kv_bytes"] + kv["overhead_bytes"]
    assert [r["regenerate_new_tokens"] for r in result["regenerate"]] == [1, 1]
    assert list(tmp_path.glob("*.duet")) == []
