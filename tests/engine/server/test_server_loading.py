"""The server listens from its first second: while the model loads every route answers 503
with Retry-After, in its dialect's error shape; a real client started with the server waits
and then succeeds (never "connection refused"). Four sequences by default, sharing one pool
of cells: the context's memory is that of one sequence."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from engine.server.loading import Gate, loading_app
from tests.conftest import REPLY_WAIT_S

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize("path, shape", [
    ("/health", "openai"), ("/v1/chat/completions", "openai"), ("/v1/models", "openai"),
    ("/v1/messages", "anthropic"), ("/api/chat", "ollama"), ("/api/tags", "ollama")])
def test_every_route_answers_503_with_retry_after_in_its_dialects_shape(path, shape):
    client = TestClient(Gate(loading_app("model.gguf")))
    r = client.post(path, json={}) if path not in ("/health", "/v1/models", "/api/tags") \
        else client.get(path)
    assert r.status_code == 503
    assert int(r.headers["retry-after"]) >= 1
    body = r.json()
    if shape == "openai":
        assert body["error"]["code"] == "model_loading" and "loading" in body["error"]["message"]
    elif shape == "anthropic":
        assert body["type"] == "error" and "loading" in body["error"]["message"]
    else:
        assert "loading" in body["error"]


def test_the_gate_opens_onto_the_real_app():
    gate = Gate(loading_app("m"))
    client = TestClient(gate)
    assert client.get("/health").status_code == 503
    gate.open(Starlette(routes=[Route("/health", lambda r: JSONResponse({"status": "ok"}))]))
    assert client.get("/health").json() == {"status": "ok"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_client_started_with_the_server_waits_for_the_model_and_succeeds(tmp_path):
    port = _free_port()
    env = {**os.environ, "DUET_HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", "target",
                             "--port", str(port), "--drafter", "none"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, proc.stderr.read() if proc.stderr else ""
        # from here the port is open: each answer is 503 (loading) or the model's
        statuses = set()
        with httpx.Client(timeout=REPLY_WAIT_S) as http:
            statuses.add(http.get(f"http://127.0.0.1:{port}/health").status_code)
        assert statuses <= {200, 503}
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=120)
        r = client.chat.completions.create(model="target", max_tokens=4, temperature=0,
                                           messages=[{"role": "user", "content": "Hi"}])
        assert r.choices[0].message.content
        assert "4 parallel" in proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=REPLY_WAIT_S)


def test_four_sequences_share_the_cells_of_one(smol):
    from engine.llama.backend import lib
    from engine.llama.context import LlamaSequence
    from engine.llama.context_params import ContextParams

    with LlamaSequence(smol, ContextParams(n_ctx=2048, n_parallel=4)) as ctx:
        assert lib.llama_n_ctx(ctx._handle) == 2048  # not 4 x 2048
        assert len(ctx.sequences) == 4 and all(s.n_ctx == 2048 for s in ctx.sequences)


def test_a_terminated_server_keeps_its_clients_conversation_on_disk(smol_path, tmp_path):
    """SIGTERM (a service manager's stop): uvicorn shuts down gracefully, then the models close,
    each writing its sequences' conversations to the disk KV store, so that after a restart the
    client's next request reads only what is new. Before, uvicorn raised SIGTERM again once it
    had shut down and the process ended there, its models never closed."""
    env = {**os.environ, "DUET_KV_DIR": str(tmp_path / "kv")}
    words = " ".join(f"Fact {i}: the pump number {i} runs at {i * 3 % 11} bar." for i in range(20))
    messages = [{"role": "system", "content": "Answer in one short sentence."},
                {"role": "user", "content": words + "\nWhich pump runs at 5 bar?"}]

    def ask(port: int, messages: list[dict[str, str]]) -> openai.types.chat.ChatCompletion:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=120)
        return client.chat.completions.create(model=smol_path.stem, max_tokens=12, temperature=0,
                                              messages=messages)  # type: ignore[arg-type]

    def served(messages: list[dict[str, str]]) -> tuple[openai.types.chat.ChatCompletion, int]:
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", str(smol_path),
                                 "--port", str(port), "--ctx", "1024", "--drafter", "none"],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            assert proc.stdout is not None and "listening on" in proc.stdout.readline()
            reply = ask(port, messages)
        finally:
            proc.terminate()
            rc = proc.wait(timeout=REPLY_WAIT_S)
        return reply, rc

    first, rc = served(messages)
    assert rc == 128 + signal.SIGTERM
    assert len(list((tmp_path / "kv").glob("*.kv"))) == 1
    assert first.usage is not None and first.usage.prompt_tokens > 150
    messages += [{"role": "assistant", "content": first.choices[0].message.content or ""},
                 {"role": "user", "content": "And which one at 2 bar?"}]
    again, _ = served(messages)
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
