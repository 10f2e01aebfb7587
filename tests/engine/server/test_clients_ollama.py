"""The ollama client, unchanged, against a real server: chat and generate (streamed or not),
options, the model routes and errors on the test model; tools and structured output (format
json and a JSON schema) on the starter 1.5B."""

from __future__ import annotations

import json

import jsonschema
import ollama
import pytest

from tests.conftest import REPLY_WAIT_S

KEY = "test-key-0123"
ASK = [{"role": "user", "content": "Name three colours of the rainbow."}]
GREEDY = {"temperature": 0, "num_predict": 24}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}}}
PARIS = [{"role": "user", "content": "What's the weather in Paris right now?"}]
COLORS = {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string"},
                                                      "maxItems": 5}},
          "required": ["colors"], "additionalProperties": False}


def client(served, key: str = KEY) -> ollama.Client:
    return ollama.Client(host=served.url, headers={"Authorization": f"Bearer {key}"}, timeout=REPLY_WAIT_S)


# -- shapes, on the test model --------------------------------------------------------------
def test_chat_and_its_stream_agree(served):
    c = client(served)
    full = c.chat(model="test", messages=ASK, options=GREEDY)
    assert full.model == served.model_id and full.done and full.message.role == "assistant"
    assert full.message.content and full.done_reason in ("stop", "length")
    assert full.prompt_eval_count > 0 and 0 < full.eval_count <= 24
    assert full.total_duration > 0 and full.eval_duration > 0  # nanoseconds
    assert full.total_duration >= full.eval_duration

    parts = list(c.chat(model="test", messages=ASK, options=GREEDY, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == full.message.content
    assert parts[-1].done_reason == full.done_reason and parts[-1].eval_count == full.eval_count


def test_stream_is_the_default(served):
    status, headers, body = served.raw("POST", "/api/chat", {
        "model": "test", "messages": ASK, "options": {"num_predict": 3}})
    assert status == 200 and headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in body.splitlines()]
    assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
    assert lines[-1]["done_reason"] == "length" and lines[-1]["eval_count"] == 3


def test_generate_streamed_or_not_raw_and_with_system(served):
    c = client(served)
    short = {"temperature": 0, "num_predict": 12}
    full = c.generate(model="test", prompt="Name three colours of the rainbow.", options=short)
    assert full.response and full.done and full.eval_count > 0
    parts = list(c.generate(model="test", prompt="Name three colours of the rainbow.", options=short,
                            stream=True))
    assert "".join(p.response for p in parts) == full.response and parts[-1].done
    # the prompt goes through the chat template, as a user message: the same prompt as a chat
    chat = c.chat(model="test", messages=[{"role": "user", "content": "Name three colours of the rainbow."}],
                  options={"num_predict": 1})
    assert chat.prompt_eval_count == full.prompt_eval_count
    system = c.generate(model="test", prompt="Name three colours of the rainbow.", system="Answer in French.",
                        options=GREEDY)
    assert system.prompt_eval_count != full.prompt_eval_count  # it replaces the default one
    raw = c.generate(model="test", prompt="The capital of France is", raw=True,
                     options={"temperature": 0, "num_predict": 4})
    assert raw.prompt_eval_count < full.prompt_eval_count and raw.eval_count == 4


def test_an_empty_request_loads_the_model(served):
    assert client(served).generate(model="test").done_reason == "load"
    assert client(served).chat(model="test", messages=[]).done_reason == "load"


def test_options_are_honoured(served):
    c = client(served)
    short = c.chat(model="test", messages=ASK, options={"temperature": 0, "num_predict": 3})
    assert short.eval_count == 3 and short.done_reason == "length"
    text = c.chat(model="test", messages=ASK, options={**GREEDY, "num_predict": 32}).message.content
    stop = text.split()[2]
    cut = c.chat(model="test", messages=ASK, options={**GREEDY, "num_predict": 32, "stop": [stop]})
    assert cut.message.content == text[:text.index(stop)] and cut.done_reason == "stop"
    seeded = [c.chat(model="test", messages=ASK, options={"temperature": 1.0, "seed": 7,
                                                         "top_k": 50, "num_predict": 12})
              for _ in range(2)]
    assert seeded[0].message.content == seeded[1].message.content
    # options that only tune how Ollama loads a model are accepted
    loaded = c.chat(model="test", messages=ASK, options={**GREEDY, "num_thread": 2,
                                                         "num_ctx": served.n_ctx, "num_gpu": 0})
    assert loaded.message.content == c.chat(model="test", messages=ASK,
                                            options=GREEDY).message.content


def test_logprobs(served):
    r = client(served).chat(model="test", messages=ASK, options={**GREEDY, "num_predict": 4},
                            logprobs=True, top_logprobs=2)
    assert len(r.logprobs) == 4 and all(len(x.top_logprobs) == 2 for x in r.logprobs)
    assert "".join(x.token for x in r.logprobs) == r.message.content


def test_model_names_list_show_ps_and_version(served):
    c = client(served)
    models = c.list().models
    assert [m.model for m in models] == [served.model_id]
    assert models[0].size > 0 and models[0].details.format == "gguf"
    assert models[0].details.family == "llama" and models[0].details.quantization_level
    for name in (served.model_id, f"{served.model_id}:latest", "test", "test:latest"):
        assert c.chat(model=name, messages=ASK, options={"num_predict": 1}).done
    shown = c.show("test")
    assert shown.modelinfo["general.architecture"] == "llama"
    assert shown.modelinfo["general.parameter_count"] > 100_000_000
    assert "completion" in shown.capabilities and shown.template and shown.details.family == "llama"
    assert "num_predict" in shown.parameters
    assert [m.model for m in c.ps().models] == [served.model_id]
    status, _, body = served.raw("GET", "/api/version", key=None)
    assert status == 200 and body["version"]


def test_errors_come_in_ollama_shape(served):
    c = client(served)
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="llama3.2", messages=ASK)
    assert e.value.status_code == 404 and "llama3.2" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="test", messages=ASK, options={"temperature": "hot"})
    assert e.value.status_code == 400 and "options.temperature" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model="test", messages=ASK, options={"mirostat": 2})
    assert e.value.status_code == 400 and "mirostat" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client(served, key="wrong").list()
    assert e.value.status_code == 401
    with pytest.raises(ollama.ResponseError) as e:
        c.show("nothing-here")
    assert e.value.status_code == 404


@pytest.mark.parametrize("path, body, words", [
    ("/api/chat", {"model": "test", "messages": ASK, "options": {"num_ctx": 1 << 20}}, "num_ctx"),
    ("/api/chat", {"model": "test", "messages": ASK, "options": {"typical_p": 0.5}}, "typical_p"),
    ("/api/chat", {"model": "test", "messages": ASK, "options": {"top_p": 2}}, "options.top_p"),
    ("/api/chat", {"model": "test", "messages": ASK, "options": {"dry_run": 1}}, "dry_run"),
    ("/api/chat", {"model": "test", "messages": ASK, "think": True}, "think"),
    ("/api/chat", {"model": "test", "messages": [{"role": "user", "content": "x",
                                                  "images": ["aGk="]}]}, "images"),
    ("/api/chat", {"model": "test", "messages": [{"role": "tool", "content": "18"}]}, "no call"),
    ("/api/chat", {"model": "test", "messages": [{"role": "robot", "content": "x"}]}, "role"),
    ("/api/chat", {"model": "test", "messages": ASK, "format": "yaml"}, "format"),
    ("/api/chat", {"model": "test", "messages": ASK, "format": {"type": "nonsense"}}, "format"),
    ("/api/chat", {"messages": ASK}, "model"),
    ("/api/chat", {"model": "test", "messages": ASK, "options": {"nonsense": None}}, "nonsense"),
    ("/api/generate", {"model": "test", "prompt": "x", "suffix": "y"}, "suffix"),
    ("/api/generate", {"model": "test", "prompt": "x", "context": [1, 2]}, "context"),
    ("/api/generate", {"model": "test", "prompt": "x", "raw": True, "system": "s"}, "raw"),
    ("/api/show", {}, "model"),
    ("/api/chat", "[1, 2", "JSON"),
])
def test_bad_requests_get_a_400_in_ollama_shape(served, path, body, words):
    status, _, payload = served.raw("POST", path, body)
    assert status == 400 and set(payload) == {"error"}, payload
    assert words in payload["error"] and "\n" not in payload["error"]


def test_show_checks_both_of_its_model_fields(served):
    model = served.raw("GET", "/api/tags", None)[2]["models"][0]["model"]
    status, _, payload = served.raw("POST", "/api/show", {"model": model, "name": "other"})
    assert status == 404 and "'other'" in payload["error"]
    assert served.raw("POST", "/api/show", {"model": model, "name": model})[0] == 200


def test_route_and_method_errors_in_ollama_shape(served):
    status, _, payload = served.raw("POST", "/api/pull", {"model": "test"})
    assert status == 404 and set(payload) == {"error"}
    status, _, payload = served.raw("GET", "/api/chat")
    assert status == 405 and set(payload) == {"error"}


# -- tools and structured output, on the starter 1.5B ---------------------------------------
def test_a_tool_round_trip(served_target):
    c = client(served_target)
    first = c.chat(model="qwen", messages=PARIS, tools=[WEATHER],
                   options={"temperature": 0, "num_predict": 120})
    calls = first.message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    jsonschema.validate(dict(calls[0].function.arguments), WEATHER["function"]["parameters"])
    assert calls[0].function.arguments["city"] == "Paris"
    history = [*PARIS, first.message,
               {"role": "tool", "tool_name": "get_weather", "content": "18 degrees Celsius"}]
    second = c.chat(model="qwen", messages=history, options={"temperature": 0, "num_predict": 60})
    assert "18" in second.message.content and not second.message.tool_calls


def test_a_streamed_tool_call(served_target):
    parts = list(client(served_target).chat(model="qwen", messages=PARIS, tools=[WEATHER],
                                            stream=True,
                                            options={"temperature": 0, "num_predict": 120}))
    calls = [c for p in parts for c in p.message.tool_calls or ()]
    assert [c.function.name for c in calls] == ["get_weather"] and parts[-1].done


def test_format_json_and_a_schema(served_target):
    c = client(served_target)
    ask = [{"role": "user", "content": "Name three primary colors, as JSON."}]
    r = c.chat(model="qwen", messages=ask, format="json", options={"temperature": 0,
                                                                  "num_predict": 80})
    assert isinstance(json.loads(r.message.content), dict) and r.done_reason == "stop"
    r = c.chat(model="qwen", messages=ask, format=COLORS, options={"temperature": 0,
                                                                  "num_predict": 80})
    jsonschema.validate(json.loads(r.message.content), COLORS)
    g = c.generate(model="qwen", prompt="Name three primary colors.", format=COLORS,
                   options={"temperature": 0, "num_predict": 80})
    jsonschema.validate(json.loads(g.response), COLORS)
