"""The anthropic SDK, unchanged, against a real server: Messages, its stream helper, system,
stop sequences, token counts and errors on the test model; tools (tool_use and tool_result
blocks, a round trip, tool_choice, streamed calls) on the starter 1.5B."""

from __future__ import annotations

import threading

import anthropic
import jsonschema
import pytest
from pydantic import BaseModel

from engine.server.dialects.anthropic.messages import error_body
from engine.server.errors import ApiError
from tests.conftest import REPLY_WAIT_S

KEY = "test-key-0123"
ASK = [{"role": "user", "content": "Name three colours of the rainbow."}]
WEATHER = {"name": "get_weather", "description": "The current weather in a city.",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
               "required": ["city"]}}
TIME = {"name": "get_time", "description": "The current time in a time zone.",
        "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}},
                         "required": ["zone"]}}
PARIS = [{"role": "user", "content": "What's the weather in Paris right now?"}]


def client(served, **kw) -> anthropic.Anthropic:
    kw.setdefault("api_key", KEY)
    return anthropic.Anthropic(base_url=served.url, max_retries=0, timeout=REPLY_WAIT_S, **kw)


def create(served, **kw):
    kw.setdefault("messages", ASK)
    kw.setdefault("max_tokens", 24)
    return client(served).messages.create(model="test", **kw)  # the fixtures' default: greedy


def text_of(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


# -- shapes, on the test model --------------------------------------------------------------
def test_a_message_and_its_stream_agree(served):
    full = create(served)
    assert full.type == "message" and full.role == "assistant" and full.model == served.model_id
    assert full.id.startswith("msg_") and [b.type for b in full.content] == ["text"]
    assert text_of(full) and full.stop_reason in ("end_turn", "max_tokens")
    assert full.usage.input_tokens > 0 and 0 < full.usage.output_tokens <= 24

    with client(served).messages.stream(model="test", messages=ASK, max_tokens=24) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text_of(full) == text_of(final)
    assert final.stop_reason == full.stop_reason
    assert final.usage.output_tokens == full.usage.output_tokens
    assert final.usage.input_tokens == full.usage.input_tokens


def test_sampling_fields_sent_in_extra_body_are_read(served):
    """The SDK has no temperature, top_p or top_k arguments any more: clients send them in
    extra_body, and the parameter table reads them."""
    sampled = [create(served, max_tokens=12, extra_body={"temperature": 1.0, "top_k": 50,
                                                         "top_p": 0.9, "seed": 7})
               for _ in range(2)]
    assert text_of(sampled[0]) == text_of(sampled[1]) != text_of(create(served, max_tokens=12))
    with pytest.raises(anthropic.BadRequestError) as e:
        create(served, extra_body={"top_k": -1})
    assert "top_k" in e.value.body["error"]["message"]


def test_max_tokens_ends_the_reply_as_max_tokens(served):
    r = create(served, max_tokens=3)
    assert r.stop_reason == "max_tokens" and r.usage.output_tokens == 3


def test_system_as_a_string_or_text_blocks(served):
    plain = create(served, system="Answer in French.")
    blocks = create(served, system=[{"type": "text", "text": "Answer in French."}])
    none = create(served)
    assert text_of(plain) == text_of(blocks) != text_of(none)
    assert plain.usage.input_tokens == blocks.usage.input_tokens != none.usage.input_tokens


def test_stop_sequences_cut_the_reply_and_are_reported(served):
    text = text_of(create(served, max_tokens=32))
    words = text.split()
    assert len(words) >= 3, text
    stop = words[2]
    cut = create(served, max_tokens=32, stop_sequences=[stop, "never-appears"])
    assert text_of(cut) == text[:text.index(stop)]
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    with client(served).messages.stream(model="test", messages=ASK, max_tokens=32,
                                        stop_sequences=[stop]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    plain = create(served, max_tokens=32, stop_sequences=["never-appears"])
    assert plain.stop_sequence is None and plain.stop_reason != "stop_sequence"


def test_count_tokens_matches_the_usage_of_the_message(served):
    r = create(served, system="Be brief.")
    counted = client(served).messages.count_tokens(model="test", messages=ASK, system="Be brief.")
    assert counted.input_tokens == r.usage.input_tokens


def test_a_bearer_token_is_accepted_too(served):
    c = anthropic.Anthropic(base_url=served.url, auth_token=KEY, max_retries=0, timeout=REPLY_WAIT_S)
    assert c.messages.create(model="test", messages=ASK, max_tokens=2).usage.output_tokens == 2


def test_errors_come_in_anthropic_shape(served):
    with pytest.raises(anthropic.AuthenticationError) as e:
        client(served, api_key="wrong").messages.create(model="test", messages=ASK, max_tokens=4)
    assert e.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                       "message": e.value.body["error"]["message"]}}
    with pytest.raises(anthropic.BadRequestError) as e:
        create(served, max_tokens=0)
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:  # a pydantic validation error
        create(served, messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}])
    assert "messages.0.content.0" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as e:
        client(served).messages.create(model="claude-3-5-haiku", messages=ASK, max_tokens=4)
    assert e.value.body["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("body, words", [
    ({"model": "test", "messages": ASK}, "max_tokens"),  # Anthropic requires it
    ({"model": "test", "max_tokens": 4, "messages": []}, "messages"),
    ({"model": "test", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]},
     "messages.0.role"),
    ({"model": "test", "max_tokens": 4, "messages": [*ASK, {"role": "assistant", "content": "A"}]},
     "last message"),
    ({"model": "test", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18"}]}]}, "no call"),
    ({"model": "test", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}, "assistant"),
    ({"model": "test", "max_tokens": 4, "messages": ASK, "tools": [WEATHER],
      "tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
    ({"model": "test", "max_tokens": 4, "messages": ASK, "tool_choice": {"type": "any"}}, "tools"),
    ({"model": "test", "max_tokens": 4, "messages": ASK, "temperature": "hot"}, "temperature"),
    ({"model": "test", "max_tokens": 4, "messages": ASK, "stop_sequences": [1]}, "stop_sequences"),
    ({"model": "test", "max_tokens": 4, "messages": ASK,
      "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ('{"model": "test", "max_tokens": 4, "messages": [', "JSON"),
])
def test_bad_requests_get_a_400_in_anthropic_shape(served, body, words):
    status, _, payload = served.raw("POST", "/v1/messages", body)
    assert status == 400, payload
    assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
    assert words in payload["error"]["message"] and "\n" not in payload["error"]["message"]


def test_x_api_key_route_method_and_size_errors_in_anthropic_shape(served):
    status, _, payload = served.raw("POST", "/v1/messages", {"model": "test", "messages": ASK,
                                                             "max_tokens": 2},
                                    headers={"x-api-key": KEY}, key=None)
    assert status == 200 and payload["usage"]["output_tokens"] == 2
    for method, path, body, code, kind in [
            ("POST", "/v1/messages", {"messages": ASK}, 401, "authentication_error"),
            ("GET", "/v1/messages", None, 405, "invalid_request_error"),
            ("POST", "/v1/messages/batches", {}, 404, "not_found_error"),
            ("POST", "/v1/messages", "x" * (2 << 20), 413, "request_too_large")]:
        status, _, payload = served.raw(method, path, body, key=KEY if code != 401 else "wrong")
        assert status == code and payload["error"]["type"] == kind, (path, payload)


def test_server_errors_are_api_error_and_overloaded_error():
    assert error_body(ApiError(500, "boom", type="server_error"))["error"] == {
        "type": "api_error", "message": "boom"}
    assert error_body(ApiError(503, "stopping"))["error"]["type"] == "overloaded_error"


def test_a_full_queue_answers_429_in_each_dialect_shape(smol_path, server_factory):
    gate = threading.Event()  # holds the engine thread before it takes a job
    server, served = server_factory(smol_path, max_queue=1, gate=gate)
    first = threading.Thread(target=lambda: served.raw("POST", "/api/generate", {
        "model": "test", "prompt": "Hi", "stream": False, "options": {"num_predict": 2}}))
    try:
        first.start()
        assert served.engine.wait_until(lambda e: e.queued == 1, timeout=REPLY_WAIT_S)
        with pytest.raises(anthropic.RateLimitError) as e:
            client(served).messages.create(model="test", messages=ASK, max_tokens=2)
        assert e.value.body["error"]["type"] == "rate_limit_error"
        assert e.value.response.headers["retry-after"] == "1"
        status, headers, payload = served.raw("POST", "/api/chat", {"model": "test",
                                                                    "messages": ASK})
        assert status == 429 and set(payload) == {"error"} and headers["retry-after"] == "1"
    finally:
        gate.set()
        first.join(timeout=REPLY_WAIT_S)
        server.close()
        served.engine.close()


# -- tools, on the starter 1.5B -------------------------------------------------------------
def ask_target(served_target, **kw):
    kw.setdefault("messages", PARIS)
    kw.setdefault("max_tokens", 120)
    return client(served_target).messages.create(model="qwen", **kw)


def test_a_tool_round_trip_with_tool_use_and_tool_result(served_target):
    first = ask_target(served_target, tools=[WEATHER])
    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert [u.name for u in uses] == ["get_weather"]
    jsonschema.validate(uses[0].input, WEATHER["input_schema"])
    assert uses[0].input["city"] == "Paris"
    history = [*PARIS, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                             "content": [{"type": "text",
                                                          "text": "18 degrees Celsius, cloudy"}]}]}]
    second = ask_target(served_target, messages=history, tools=[WEATHER],
                        tool_choice={"type": "none"}, max_tokens=60)
    assert second.stop_reason in ("end_turn", "max_tokens") and "18" in text_of(second)


def test_tool_choice_names_the_function_to_call(served_target):
    r = ask_target(served_target, messages=[{"role": "user", "content": "Tell me a joke."}],
                   tools=[WEATHER, TIME], tool_choice={"type": "tool", "name": "get_time"})
    uses = [b for b in r.content if b.type == "tool_use"]
    assert uses and all(u.name == "get_time" for u in uses) and r.stop_reason == "tool_use"
    jsonschema.validate(uses[0].input, TIME["input_schema"])


class Colors(BaseModel):
    colors: list[str]


def test_structured_output_with_parse(served_target):
    r = client(served_target).messages.parse(
        model="qwen", max_tokens=80, output_format=Colors,
        messages=[{"role": "user", "content": "Name three primary colors, as JSON."}])
    assert r.stop_reason == "end_turn" and len(r.parsed_output.colors) >= 1


def test_a_streamed_tool_call_arrives_as_input_json_deltas(served_target):
    with client(served_target).messages.stream(model="qwen", messages=PARIS, tools=[WEATHER],
                                               max_tokens=120) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "input_json" in kinds and final.stop_reason == "tool_use"
    use = next(b for b in final.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input["city"] == "Paris"
