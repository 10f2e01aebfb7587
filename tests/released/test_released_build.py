"""Duet on llama.cpp as released (issue 75): ``DUET_EXACT_KERNELS=0 DUET_ABORT_FLAG=0``, the
build a patch that no longer applies falls back to. ``./test.sh`` runs these with that build
(scripts/released_tests.sh); in the patched build's run they are skipped, saying so.

There, ``exact`` is false everywhere the patched build says true, with the reason, and the paths
that lean on the patches take their other way: a stop goes through the Python abort callback,
and a saved conversation whose state another batch shape would compute differently still
reopens (its check tolerates nothing, so it says which way it reopened)."""

from __future__ import annotations

import json

import httpx
import pytest

from engine.cli.main import main
from engine.errors import DecodeError
from engine.llama import abort
from engine.llama import exactness as ex
from engine.llama.abort import Cancel

pytestmark = pytest.mark.skipif(ex.patched_kernels(), reason="this is the patched build "
                                "(./test.sh runs these with the build as released)")

PROMPT = ["--temperature", "0", "--max-tokens", "8", "--json"]


def cli(capsys, *argv: str) -> dict:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_the_build_has_neither_patch():
    assert not ex.patched_kernels() and abort.NATIVE is None
    assert ex.exactness(True).fingerprint.startswith("duet-inexact-released-")


def test_the_command_line_says_not_exact_and_drafts(capsys, smol_path):
    out = cli(capsys, "generate", "--model", str(smol_path), *PROMPT, "--drafter", "ngram",
              "Repeat: one two three, one two three.")
    assert out["exact"] is False and "lacks" in out["exact_reason"] and out["n_tokens"] > 0


def test_a_stop_goes_through_the_python_callback(smol):
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams

    stop = Cancel()
    stop.set()
    with LlamaSequence(smol, ContextParams(n_ctx=1024)) as ctx:
        with pytest.raises(DecodeError, match="cancelled"):
            ctx.decode([1] + list(range(200, 400)), logits="none", cancel=stop)
        assert ctx.n_past == 0
        ctx.decode([1, 200, 201], logits="none")
        assert ctx.n_past == 3


def test_a_session_continues(capsys, smol_path, tmp_path):
    session = tmp_path / "chat.duet"
    args = ("generate", "--model", str(smol_path), *PROMPT, "--drafter", "none",
            "--session", str(session))
    cli(capsys, *args, "Name a colour.")
    second = cli(capsys, *args, "And another one?")
    assert second["n_tokens"] > 0 and second["exact"] is False
    assert second["session"]["saved"]
    # restored from its KV state, or read again from its text and said so: never silently
    assert second["session"]["restored_kv"] or second["session"]["note"]


def test_the_server_names_the_build(smol_path, server_factory):
    server, handle = server_factory(smol_path, api_key=None, drafter="none")
    try:
        meta = httpx.get(f"{handle.url}/v1/models").json()["data"][0]["meta"]
        reply = httpx.post(f"{handle.url}/v1/chat/completions", timeout=600, json={
            "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 2}).json()
    finally:
        server.close()
        handle.engine.close()
    assert meta["exact"] is False and "lacks" in meta["exact_reason"]
    assert reply["system_fingerprint"].startswith("duet-inexact-released-")
