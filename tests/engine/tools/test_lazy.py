"""The grammar of a call under tool_choice auto (engine.tools.lazy), on the real 1.5B's vocabulary
and template: free text until a call of an offered function starts, then its schema; a start the
grammar refuses stays text; and a real reply, the same with and without speculation."""

from __future__ import annotations

import json

import jsonschema
import pytest

from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.decode.speculative.speculator import build_speculation
from engine.events import Done
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.runtime.generate import Generator
from engine.tools import Tool
from engine.tools.formats import HERMES, detect
from engine.tools.lazy import LazyMatcher, lazy_grammar
from engine.tools.prompting import tool_prompt
from engine.tools.scanner import parse

WEATHER = Tool("get_weather", "The current weather in a city.",
               {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}})
TIME = Tool("get_time", "The time in a city.", {"type": "object", "properties": {"city": {"type": "string"}}})


@pytest.fixture(scope="module")
def lazy(qwen_target):
    assert detect(qwen_target.chat_template) is HERMES
    return lazy_grammar(qwen_target, HERMES, [WEATHER, TIME])


def write(model, m: LazyMatcher, text: str) -> None:
    """The model writes ``text``: each token is checked, then taken, as a reply's are."""
    for t in model.tokenize(text, add_special=False, parse_special=True):
        assert m.allows(t), f"{model.token_text(t)!r} refused after {text!r}"
        m.advance(t)


def test_text_is_free_until_a_call_of_an_offered_function_starts(qwen_target, lazy):
    m = lazy.matcher()
    write(qwen_target, m, "Let me look that up.\n```json\n{\n  \"name\": \"get_weat")
    assert not m.active and m.forced() == [] and m.mask().all() and not m.done
    write(qwen_target, m, "her\"")
    assert m.active and m.held == 1  # from here the schema holds
    brace = qwen_target.tokenize("}", add_special=False)[0]
    assert not m.allows(brace)  # a call without its arguments is refused
    write(qwen_target, m, ', "arguments": {"')
    town, city = (qwen_target.tokenize(w, add_special=False)[0] for w in ("town", "city"))
    assert not m.allows(town) and m.allows(city)  # only the schema's keys
    write(qwen_target, m, 'city": "Lisbon"}}\n```')
    assert not m.active and m.mask().all()  # the call is whole: the reply is free again
    write(qwen_target, m, '\nAnd the time:\n<tool_call>\n{"name": "get_time"')
    assert m.active  # a second call is held in turn


def test_with_one_call_allowed_the_reply_ends_after_it(qwen_target):
    m = lazy_grammar(qwen_target, HERMES, [WEATHER], parallel=False).matcher()
    write(qwen_target, m, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>')
    newline = qwen_target.tokenize("\n", add_special=False)[0]
    assert m.active and not m.allows(newline) and m.allows(next(iter(qwen_target.eog_ids)))


def test_json_naming_no_offered_function_stays_text(qwen_target, lazy):
    m = lazy.matcher()
    write(qwen_target, m, 'Here it is:\n```json\n{"name": "Alice", "age": 36}\n```\n{"name": "get_weather"')
    assert not m.active  # a bare object counts only where it opens the reply


def test_a_start_the_grammar_refuses_stays_text_and_a_later_call_is_held(qwen_target, lazy):
    m = lazy.matcher()
    write(qwen_target, m, '<tool_call>[{"name": "get_weather"')  # the tag, then a list: not its form
    assert not m.active
    write(qwen_target, m, '}]</tool_call>\n<tool_call>\n{"name": "get_time"')
    assert m.active


@pytest.mark.parametrize("params", [SamplingParams(temperature=0, max_tokens=80),
                                    SamplingParams(temperature=0.7, seed=11, max_tokens=80)],
                         ids=["greedy", "seeded"])
def test_a_reply_that_calls_is_held_to_the_schema_the_same_with_speculation(qwen_target, params):
    """The 1.5B asked for the weather under auto writes the call as a fenced block; the grammar
    takes over at the name, and with n-gram drafts the reply is token for token the same (a
    seeded sampled one too: each position's draw is fixed by the seed)."""
    prompt, fmt = tool_prompt(qwen_target, [Message("user", "What is the weather like in Lisbon "
                                                    "right now? Use the tool.")], [WEATHER])
    lazy = lazy_grammar(qwen_target, fmt, [WEATHER])
    replies, matchers = [], []
    for drafter in ("none", "ngram"):
        ctx = LlamaSequence(qwen_target, ContextParams(n_ctx=1024))
        spec = build_speculation(qwen_target, ctx, None, SpeculativeParams(drafter=drafter, adaptive=False),
                                 measure=False) if drafter != "none" else None
        matchers.append(lazy.matcher())
        done = list(Generator.alone(ctx, spec).complete(prompt, params, grammar=matchers[-1]))[-1]
        assert isinstance(done, Done)
        replies.append(done)
        ctx.close()
    assert replies[0].token_ids == replies[1].token_ids and replies[1].stats.proposed > 0
    assert [m.held for m in matchers] == [1, 1]
    _, calls = parse(fmt, replies[0].text, ["get_weather"])
    assert [c.name for c in calls] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER.parameters)
