"""Reading tool calls back: each family's form, the fenced and bare JSON forms small models use,
streams cut anywhere, and text that only looks like a call."""

from __future__ import annotations

import json

import pytest

from engine.chat.messages import ToolCall
from engine.tools import Tool, ToolChoice, fallback
from engine.tools.formats import GENERIC, HERMES, LLAMA3, MISTRAL, detect
from engine.tools.scanner import Scanner, parse

NAMES = ["get_weather", "get_time"]
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def streamed(fmt, text, sizes=(1, 3, 7)):
    """What the scanner yields for ``text`` fed in chunks of each size: (content, calls)."""
    results = []
    for n in sizes:
        s = Scanner(fmt, NAMES)
        items = []
        for i in range(0, len(text), n):
            items += s.feed(text[i:i + n])
        items += s.close()
        content = "".join(x for x in items if isinstance(x, str))
        calls = [(c.name, json.loads(c.arguments)) for c in items if isinstance(c, ToolCall)]
        results.append((content, calls))
    assert all(r == results[0] for r in results)  # where the chunks fall does not matter
    return results[0]


@pytest.mark.parametrize("fmt, text", [
    (HERMES, f"<tool_call>\n{CALL}\n</tool_call>"),
    (HERMES, f"```json\n{CALL}\n```"),
    (HERMES, "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```"),
    (HERMES, f"{{{CALL}}}"),  # Qwen's template shows the form with doubled braces
    (MISTRAL, f"[{CALL}]"),
    (LLAMA3, '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    (GENERIC, f"  {CALL}"),
    (GENERIC, '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}'),  # a string
])
def test_each_form_reads_as_one_call(fmt, text):
    content, calls = parse(fmt, text, NAMES)
    assert content == "" and [(c.name, json.loads(c.arguments)) for c in calls] == \
        [("get_weather", {"city": "Paris"})]
    assert streamed(fmt, text) == ("", [("get_weather", {"city": "Paris"})])


def test_text_around_calls_stays_text_and_several_calls_keep_their_order():
    text = (f"Let me check.\n<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n"
            '{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>')
    content, calls = parse(HERMES, text, NAMES)
    assert content == "Let me check." and [c.name for c in calls] == ["get_weather", "get_time"]
    assert len({c.id for c in calls}) == 2
    assert streamed(HERMES, text)[1] == [("get_weather", {"city": "Paris"}),
                                         ("get_time", {"zone": "CET"})]


@pytest.mark.parametrize("text", [
    "Here is code:\n```python\nprint(1)\n```\nDone.",
    '<tool_call>\n{"name": "delete_everything", "arguments": {}}\n</tool_call>',  # not offered
    '<tool_call>\n{"name": "get_weather", "arguments": [1]}\n</tool_call>',  # not an object
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',  # cut off
    "{not json} and more",
    "Use `{` and `}` for dicts, e.g. {\"a\": 1}.",
    "The answer is 4.",
])
def test_what_is_not_a_call_comes_back_as_the_text_it_was(text):
    assert parse(HERMES, text, NAMES) == (text, [])
    assert streamed(HERMES, text) == (text, [])


def test_text_is_released_as_soon_as_it_cannot_start_a_call():
    s = Scanner(HERMES, NAMES)
    assert s.feed("Hello there") == ["Hello there"]
    assert s.feed(" <tool") == []  # could be an opener (and lone whitespace waits for text)
    assert s.feed("kit>") == [" <toolkit>"]


def test_the_family_is_told_from_the_template():
    assert detect("... <tool_call> ...") is HERMES and detect("[TOOL_CALLS]") is MISTRAL
    assert detect("<|python_tag|>") is LLAMA3 and detect(None) is GENERIC


def test_a_template_without_tools_gets_them_described_and_results_as_messages():
    from engine.chat.messages import Message

    msgs = [Message("system", "Be brief."), Message("user", "Weather?"),
            Message("assistant", "", tool_calls=(ToolCall("c1", "get_weather", '{"city": "X"}'),)),
            Message("tool", "sunny", tool_call_id="c1", name="get_weather")]
    out = fallback.messages(msgs, [Tool("get_weather", "The weather.")])
    assert [m.role for m in out] == ["system", "user", "assistant", "user"]
    assert out[0].content.startswith("Be brief.") and "get_weather" in out[0].content
    assert '"city": "X"' in out[2].content and out[2].content.startswith("```json")
    assert out[3].content == "Result of get_weather:\nsunny"
    assert parse(GENERIC, out[2].content, NAMES)[1][0].name == "get_weather"


def test_the_enforcing_grammar_names_each_offered_function():
    from engine.tools.formats import grammar

    class Vocab:
        def tokenize(self, text, **kw):
            return [7]

        def inert(self, text):
            return False

    tools = [Tool("get_weather"), Tool("get_time")]
    g = grammar(HERMES, Vocab(), tools, ToolChoice("function", "get_time", parallel=False))
    assert '"const": "get_time"' in g and "get_weather" not in g and g.startswith("start: block\n")
    g = grammar(HERMES, Vocab(), tools, ToolChoice("required"))
    assert '"const": "get_time"' in g and '"const": "get_weather"' in g and "<[7]>" in g


def test_a_forced_call_closes_the_objects_its_schema_leaves_open() -> None:
    from engine.tools.formats import closed

    schema = {"type": "object", "properties": {"a": {"type": "object"}, "b": {
        "type": "array", "items": {"properties": {"c": {"type": "string"}}}}},
        "$defs": {"d": {"type": "object", "additionalProperties": True}}}
    out = closed(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["b"]["items"]["additionalProperties"] is False
    assert out["$defs"]["d"]["additionalProperties"] is True  # what a schema says stays
    assert "additionalProperties" not in schema  # the tool's own schema is not changed
