"""The OpenAI-compatible endpoints through the real openai client and raw HTTP."""

from __future__ import annotations

import openai
import pytest

QUESTION = [{"role": "user", "content": "Name three colours of the rainbow."}]


def _chat(client, **kw):
    kw.setdefault("messages", QUESTION)
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 24)
    return client.chat.completions.create(model="test", **kw)


def test_models_and_health(served):
    ids = [m.id for m in served.client().models.list().data]
    assert ids == [served.model_id]
    status, _, body = served.raw("GET", "/health", key=None)  # health needs no key
    assert status == 200 and body["status"] == "ok"


def test_stream_assembles_to_the_full_reply_with_usage_and_timings(served):
    client = served.client()
    full = _chat(client)
    text = full.choices[0].message.content
    assert text and full.choices[0].finish_reason in ("stop", "length")
    assert full.usage.completion_tokens > 0 and full.usage.prompt_tokens > 0
    timings = full.model_extra["timings"]
    for key in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second",
                "draft_n", "draft_n_accepted"):
        assert key in timings
    assert timings["predicted_n"] == full.usage.completion_tokens

    chunks = list(_chat(client, stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == text
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == full.choices[0].finish_reason
    assert "timings" in finals[0].model_extra
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_stop_string_cuts_the_reply(served):
    client = served.client()
    text = _chat(client, max_tokens=32).choices[0].message.content
    words = text.split()
    assert len(words) >= 3, text
    stop = words[2]
    cut = _chat(client, max_tokens=32, stop=[stop, "never-appears"])
    assert cut.choices[0].message.content == text[:text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    single = _chat(client, max_tokens=32, stop=stop)  # a plain string works too
    assert single.choices[0].message.content == cut.choices[0].message.content


def test_text_parts_and_developer_role(served):
    client = served.client()
    plain = _chat(client, messages=[{"role": "system", "content": "Be brief."}, *QUESTION])
    parts = _chat(client, messages=[{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                                    {"role": "user", "content": [{"type": "text", "text": QUESTION[0]["content"]}]}])
    # the same prompt: every token of it but the last came from the first request's cache
    # (the replies may still part at a near-tie: that last token is read alone)
    assert parts.usage.prompt_tokens == plain.usage.prompt_tokens
    assert parts.usage.prompt_tokens_details.cached_tokens == parts.usage.prompt_tokens - 1


def test_text_completion_stream_and_not(served):
    client = served.client()
    full = client.completions.create(model=served.model_id, prompt="The capital of France is",
                                     max_tokens=8, temperature=0)
    assert full.choices[0].text and full.usage.prompt_tokens > 0
    chunks = list(client.completions.create(model=served.model_id, prompt="The capital of France is",
                                            max_tokens=8, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == full.choices[0].text


def test_a_missing_or_wrong_key_gets_401(served):
    with pytest.raises(openai.AuthenticationError):
        _chat(served.client(api_key="wrong"))
    status, headers, body = served.raw("POST", "/v1/chat/completions",
                                       {"messages": QUESTION}, key=None)
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert headers["www-authenticate"] == "Bearer"
    status, _, _ = served.raw("GET", "/v1/models", key=None)
    assert status == 401


def _error(served, body, path="/v1/chat/completions", method="POST", headers=None):
    status, _, payload = served.raw(method, path, body, headers=headers)
    assert 400 <= status < 500, (status, payload)
    assert isinstance(payload, dict) and set(payload["error"]) == {"message", "type", "param", "code"}
    assert payload["error"]["message"]
    return status, payload["error"]


@pytest.mark.parametrize("body, param", [
    ('{"messages": [', None),                                         # malformed JSON
    ("[1, 2]", None),                                                 # not an object
    ("[" * 100_000 + "]" * 100_000, None),                            # nested past the parser
    ({"messages": QUESTION, "temperature": "hot"}, "temperature"),   # wrong type
    ({"messages": QUESTION, "max_tokens": "8"}, "max_tokens"),       # a string is not a number
    ({"messages": QUESTION, "max_tokens": 0}, "max_tokens"),
    ({"messages": QUESTION, "top_p": 1.5}, "top_p"),
    ({"messages": "hello"}, "messages"),
    ({"messages": []}, "messages"),
    ({}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.tool_call_id"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "c1"}]}, "messages.0"),
    ({"messages": [{"role": "user"}]}, "messages.0.content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages.0.content.0"),
    ({"messages": QUESTION, "presence_penalty": 2.5}, "presence_penalty"),
    ({"messages": QUESTION, "frequency_penalty": "much"}, "frequency_penalty"),
    ({"messages": QUESTION, "n": 2}, "n"),
    ({"messages": QUESTION, "tools": [{"type": "function"}]}, "tools.0.function"),
    ({"messages": QUESTION, "logit_bias": {"5": 1}}, "logit_bias"),
    ({"messages": QUESTION, "stop": 5}, "stop"),
    ('{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages"),  # a lone surrogate
    ({"prompt": 5}, "prompt"),
])
def test_malformed_requests_get_a_400(served, body, param):
    path = "/v1/completions" if isinstance(body, dict) and "prompt" in body else "/v1/chat/completions"
    status, error = _error(served, body, path=path)
    assert status == 400
    assert error["param"] == param


def test_a_prompt_longer_than_the_context_gets_a_400(served):
    long = " ".join(["word"] * (served.n_ctx + 100))
    status, error = _error(served, {"messages": [{"role": "user", "content": long}]})
    assert status == 400 and error["code"] == "context_length_exceeded"
    status, error = _error(served, {"prompt": long}, path="/v1/completions")
    assert status == 400 and error["code"] == "context_length_exceeded"


def test_unknown_model_route_and_method_get_404_405(served):
    status, error = _error(served, {"model": "gpt-4o", "messages": QUESTION})
    assert status == 404 and error["code"] == "model_not_found" and error["param"] == "model"
    assert _error(served, None, path="/v1/audio/speech")[0] == 404
    assert _error(served, None, path="/v1/chat/completions", method="GET")[0] == 405


def test_a_body_over_the_limit_gets_413(served):
    big = '{"messages": [{"role": "user", "content": "' + "x" * (1 << 20) + '"}]}'
    status, error = _error(served, big)
    assert status == 413
    # The same without a Content-Length (chunked): refused while reading.
    def chunks():
        yield big[:1000].encode()
        yield big[1000:].encode()
    status, error = _error(served, chunks())  # http.client sends an iterable chunked
    assert status == 413


def test_the_engine_survives_the_errors(served):
    assert _chat(served.client(), max_tokens=4).choices[0].message.content is not None


def test_cors_is_off_unless_an_origin_is_given(served, smol_path, server_factory):
    preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    status, headers, _ = served.raw("OPTIONS", "/v1/chat/completions", headers=preflight, key=None)
    assert "access-control-allow-origin" not in headers
    server, other = server_factory(smol_path, cors=("http://app.example",))
    try:
        status, headers, _ = other.raw("OPTIONS", "/v1/chat/completions", headers=preflight, key=None)
        assert status == 200 and headers["access-control-allow-origin"] == "http://app.example"
        status, headers, _ = other.raw("GET", "/v1/models", headers={"Origin": "http://app.example"})
        assert status == 200 and headers["access-control-allow-origin"] == "http://app.example"
    finally:
        server.close()
        other.engine.close()
