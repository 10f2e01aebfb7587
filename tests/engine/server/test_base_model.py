"""A base model (no chat template: the real Gemma 3 270M) is not chatted through a made-up
template: every chat dialect answers 400 in one line (it answered "Say hello." with
``Say hello.<|im_end`` through ChatML), while raw prompts keep working: /v1/completions, and
Ollama's /api/generate, which gives such a model the prompt as it is (Ollama's own default)."""

from __future__ import annotations

import pytest

from tests.conftest import model_path

HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def base(server_factory, duet_home):
    server, handle = server_factory(model_path("gemma"), drafter="none", alias="gemma")
    yield handle
    server.close()
    handle.engine.close()


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"model": "gemma", "messages": HELLO}),
    ("/v1/messages", {"model": "gemma", "max_tokens": 8, "messages": HELLO}),
    ("/api/chat", {"model": "gemma", "messages": HELLO, "stream": False}),
    ("/v1/responses", {"model": "gemma", "input": "Say hello."}),
])
def test_each_chat_dialect_refuses_a_model_without_a_chat_template(base, path, body):
    status, _, reply = base.raw("POST", path, body)
    assert status == 400, reply
    error = reply["error"]
    message = error if isinstance(error, str) else error["message"]
    assert "no chat template" in message and "completion only" in message and "\n" not in message
    if path == "/v1/chat/completions":
        assert error["code"] == "no_chat_template" and error["param"] == "messages"


def test_a_raw_prompt_still_works(base):
    status, _, reply = base.raw("POST", "/v1/completions",
                                {"model": "gemma", "prompt": "Say hello.", "max_tokens": 4})
    assert status == 200 and reply["choices"][0]["text"]
    status, _, reply = base.raw("POST", "/api/generate", {"model": "gemma", "prompt": "Once upon a",
                                                           "stream": False,
                                                           "options": {"num_predict": 4}})
    assert status == 200 and reply["response"]
    status, _, reply = base.raw("POST", "/api/generate", {"model": "gemma", "prompt": "Hi",
                                                           "system": "Be brief.", "stream": False})
    assert status == 400 and "no chat template" in reply["error"]
