"""The openai SDK's Responses API (``client.responses``), unchanged, against a real server: text,
its typed event stream and the SDK's stream helper, logprobs, the length limit and refusals on
the test model; function calls (a round trip with function_call_output items, streamed
arguments, a forced call), and ``responses.parse`` with a pydantic model on the starter 1.5B."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel

WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city.",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
               "required": ["city"]}}
TIME = {"type": "function", "name": "get_time", "description": "The current time in a time zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                       "required": ["zone"]}}
PARIS = "What's the weather in Paris right now?"


def create(served, **kw):
    kw.setdefault("temperature", 0)
    return served.client().responses.create(model=served.model_id, **kw)


# -- shapes, on the test model --------------------------------------------------------------
def test_a_response_and_its_stream_agree(served):
    r = create(served, input="Name three colours of the rainbow.", max_output_tokens=12)
    assert r.object == "response" and r.id.startswith("resp_")
    assert [o.type for o in r.output] == ["message"] and r.output_text
    assert r.usage.output_tokens == 12 and r.usage.input_tokens > 0
    events = list(create(served, input="Name three colours of the rainbow.",
                         max_output_tokens=12, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.incomplete"  # cut at max_output_tokens, as the whole body
    assert [e.sequence_number for e in events] == list(range(len(events)))
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert streamed == done.text == r.output_text
    assert events[-1].response.output_text == r.output_text
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert r.status == "incomplete"


def test_the_sdk_stream_helper_gives_the_final_response(served):
    """The helper needs ``response.completed``: a reply that ends by itself. (One cut at
    max_output_tokens ends with ``response.incomplete``, as OpenAI's own server sends it, for
    which this SDK's helper has no final response.)"""
    with served.client().responses.stream(model=served.model_id, temperature=0,
                                          input="Say hello.", max_output_tokens=200) as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert final.status == "completed" and final.output_text == text
    assert 1 <= final.usage.output_tokens < 200


def test_instructions_and_message_items_make_the_same_prompt(served):
    a = create(served, instructions="Answer in French.", input="Good morning!", max_output_tokens=8)
    b = create(served, input=[{"role": "developer", "content": "Answer in French."},
                              {"role": "user", "content": [{"type": "input_text",
                                                            "text": "Good morning!"}]}],
               max_output_tokens=8)
    assert a.usage.input_tokens == b.usage.input_tokens and a.output_text == b.output_text


def test_logprobs_come_with_each_token_when_included(served):
    r = create(served, input="Say hello.", max_output_tokens=6, top_logprobs=2,
               include=["message.output_text.logprobs"])
    part = r.output[0].content[0]
    assert len(part.logprobs) == r.usage.output_tokens
    assert all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in part.logprobs)
    assert "".join(lp.token for lp in part.logprobs) == part.text
    events = list(create(served, input="Say hello.", max_output_tokens=6, top_logprobs=2,
                         include=["message.output_text.logprobs"], stream=True))
    streamed = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    assert [(lp.token, lp.logprob) for lp in streamed] == \
        [(lp.token, lp.logprob) for lp in part.logprobs]
    plain = create(served, input="Say hello.", max_output_tokens=6)
    assert not plain.output[0].content[0].logprobs


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "include": ["file_search_call.results"]}, "include.0"),
    ({"input": [{"type": "function_call_output", "call_id": "c1", "output": "x"}]}, "input.0.call_id"),
    ({"input": [{"type": "web_search_call", "id": "w"}]}, "input.0"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
     "tool_choice"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "temperature": "hot"}, "temperature"),
    ({"input": [{"role": "assistant", "content": "I was saying"}]}, "input"),
])
def test_bad_requests_get_a_400_naming_the_field(served, body, param):
    status, _, payload = served.raw("POST", "/v1/responses", {"model": served.model_id, **body})
    assert status == 400, payload
    assert payload["error"]["param"] == param and "\n" not in payload["error"]["message"]


def test_the_sdk_reports_a_refusal_as_its_error(served):
    with pytest.raises(openai.BadRequestError, match="background"):
        create(served, input="hi", background=True)


def test_previous_response_id_continues_the_kept_conversation(served):
    first = create(served, instructions="Be brief.", input="My name is Ada.", max_output_tokens=8)
    assert first.store is True
    second = create(served, previous_response_id=first.id, input="What is my name?",
                    max_output_tokens=8)
    whole = create(served, input=[
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "What is my name?"}], max_output_tokens=8)
    # the same prompt, token for token (the first request's instructions are not carried over,
    # as OpenAI has it): sent whole right after, all of it but its last token is in the cache
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens == whole.usage.input_tokens
    assert whole.usage.input_tokens_details.cached_tokens >= whole.usage.input_tokens - 1
    third = create(served, previous_response_id=second.id, input="And again?", max_output_tokens=4)
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens


def test_a_response_stored_false_or_unknown_is_not_found(served):
    unkept = create(served, input="Hello.", max_output_tokens=4, store=False)
    assert unkept.store is False
    for rid in (unkept.id, "resp_nothing"):
        with pytest.raises(openai.NotFoundError, match="not kept"):
            create(served, previous_response_id=rid, input="Go on.", max_output_tokens=4)


def test_a_streamed_response_is_kept_too(served):
    events = list(create(served, input="My name is Ada.", max_output_tokens=6, stream=True))
    rid = events[-1].response.id
    follow = create(served, previous_response_id=rid, input="Who am I?", max_output_tokens=4)
    assert follow.usage.input_tokens_details.cached_tokens > 0


def test_the_store_keeps_each_message_once_and_drops_the_least_recently_used():
    """A walk through a chain uses its responses from the newest to the first, so that past the
    size a continuation goes before the response it continues (which others may continue)."""
    from engine.chat.messages import Message
    from engine.server.dialects.openai.response_store import ResponseStore

    store = ResponseStore(max_chars=100)
    store.put("a", None, (Message("user", "x" * 30), Message("assistant", "y" * 10)))
    store.put("b", "a", (Message("user", "z" * 30), Message("assistant", "w" * 10)))
    assert [m.content[0] for m in store.conversation("b")] == ["x", "y", "z", "w"]
    assert store.chars == 80
    store.put("c", None, (Message("user", "v" * 30),))
    assert store.conversation("b") is None and store.conversation("a") is not None
    assert store.conversation("c") is not None and len(store) == 2 and store.chars == 70


# -- function calls and schemas, on the starter 1.5B -------------------------------------------
def call_of(r):
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1, r.output
    return calls[0]


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "name": "get_weather"}])
def test_a_function_call_comes_back_as_a_function_call_item(served_target, choice):
    r = create(served_target, input=PARIS, tools=[WEATHER, TIME], tool_choice=choice,
               max_output_tokens=120)
    call = call_of(r)
    args = json.loads(call.arguments)
    jsonschema.validate(args, WEATHER["parameters"])
    assert call.name == "get_weather" and args["city"] == "Paris"
    assert call.call_id.startswith("call_") and r.status == "completed"


def test_a_round_trip_with_the_output_reuses_the_conversation(served_target):
    first = create(served_target, input=PARIS, tools=[WEATHER], max_output_tokens=120)
    call = call_of(first)
    history = [{"role": "user", "content": PARIS}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id,
                "output": "18 degrees Celsius, cloudy"}]
    second = create(served_target, input=history, tools=[WEATHER], max_output_tokens=80)
    # the conversation up to the call comes from the cache: the call and its output are new
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens - 2
    assert second.usage.input_tokens - cached < 60
    assert second.output_text or any(o.type == "function_call" for o in second.output)
    # told not to call again, the 1.5B answers from the output
    third = create(served_target, input=history, tools=[WEATHER], tool_choice="none",
                   max_output_tokens=60)
    assert "18" in third.output_text


def test_streamed_arguments_arrive_as_events_and_the_helper_gathers_them(served_target):
    with served_target.client().responses.stream(
            model="qwen", temperature=0, input=PARIS, tools=[WEATHER],
            max_output_tokens=120) as s:
        events = list(s)
        final = s.get_final_response()
    added = [e for e in events if e.type == "response.output_item.added"
             and e.item.type == "function_call"]
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert len(added) == 1 and added[0].item.name == "get_weather"
    assert json.loads(deltas) == json.loads(call_of(final).arguments)
    assert json.loads(deltas)["city"] == "Paris"


def test_parse_returns_a_validated_object(served_target):
    class Colors(BaseModel):
        colors: list[str]

    r = served_target.client().responses.parse(
        model="qwen", temperature=0, max_output_tokens=80, text_format=Colors,
        input="Name three primary colors.")
    assert r.output_parsed is not None and len(r.output_parsed.colors) >= 1
