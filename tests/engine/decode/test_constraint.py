"""Constrained decoding on the real models: replies that follow a JSON schema or a grammar, the
same with and without speculation, refusals in one line, and bounded work on hostile input."""

import json
import threading
from unittest import mock

import jsonschema
import pytest

from engine.chat.messages import Message
from engine.decode.constraint import Grammar, GrammarError, check_schema
from engine.decode.sampling import SamplingParams
from engine.decode.speculative.params import SpeculativeParams
from engine.events import Done, Token
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.generate import Generator
from engine.runtime.runtime import Runtime, RuntimeConfig

PEOPLE = {"type": "object", "properties": {
    "people": {"type": "array", "maxItems": 4, "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": False}}},
    "required": ["people"], "additionalProperties": False}
TEXT = ("Extract the people as JSON. Ada is 36 years old. Alan is 41 years old. Grace is 85 "
        "years old. Linus is 28 years old.")
GREEDY = SamplingParams(temperature=0, max_tokens=120)


def reply(gen, grammar, params=GREEDY, text=TEXT, **kw):
    events = list(gen.chat([Message("user", text)], params, grammar=grammar, **kw))
    assert isinstance(events[-1], Done)
    return events


def runtime(path, drafter="none", n_ctx=1024):
    return Runtime(RuntimeConfig(target=ModelSpec(path), context=ContextParams(n_ctx=n_ctx),
                                 speculative=SpeculativeParams(drafter=drafter, adaptive=False)))


@pytest.fixture(scope="module")
def people(smol):
    return Grammar.compile(smol, "json_schema", PEOPLE)


def test_a_schema_constrained_reply_parses_and_validates(smol, people):
    gen = Generator.alone(LlamaSequence(smol, ContextParams(n_ctx=1024)))
    done = reply(gen, people.matcher())[-1]
    assert done.reason == "stop", done.text
    jsonschema.validate(json.loads(done.text), PEOPLE)


def test_the_same_reply_with_and_without_speculation_and_forced_tokens_batched(smol_path, people):
    with runtime(smol_path) as rt:
        plain = reply(rt.generator, people.matcher())[-1]
    with runtime(smol_path, "ngram") as rt:
        events = reply(rt.generator, people.matcher())
    spec = events[-1]
    assert spec.token_ids == plain.token_ids
    forced = [e for e in events if isinstance(e, Token) and e.drafter == "grammar"]
    assert spec.stats.drafters_used.get("grammar", 0) > 0 and len(forced) > 5
    assert spec.stats.target_passes < plain.stats.target_passes  # keys and punctuation batched
    assert "".join(e.text for e in forced) in spec.text or forced  # they are part of the reply
    steps, step = [], []  # the drafters of each pass: forced keys, then the n-gram's copy of a name
    for e in (e for e in events if isinstance(e, Token)):
        step.append(e.drafter)
        if e.step_end:
            steps.append(step)
            step = []
    assert any("grammar" in s and "ngram" in s for s in steps)


def test_each_forced_token_is_the_only_one_its_mask_allows(smol, people):
    m = people.matcher()
    forced = m.forced()
    assert len(forced) >= 2 and m.forced() == forced  # looking ahead takes nothing
    for token in forced:
        mask = m.mask()
        assert mask.sum() == 1 and mask[token]
        m.advance(token)


@pytest.fixture
def asked(monkeypatch):
    """For each pass of more than one token, how many tokens and which logits it asked for."""
    import engine.llama.context as context_module

    seen: list = []
    real = context_module.decode_batch

    def spy(parts, cancel=None):
        seen.extend((len(p.tokens), p.logits) for p in parts
                    if len(p.tokens) > 1 and p.logits != "none")
        return real(parts, cancel)

    monkeypatch.setattr("engine.decode.scheduler.decode_batch", spy)
    return seen


def test_forced_tokens_are_decoded_without_logits_and_change_no_token(smol, people, asked):
    ctx = LlamaSequence(smol, ContextParams(n_ctx=1024))
    # with log-probabilities every row is computed, and each forced token checked against it
    checked = reply(Generator.alone(ctx), people.matcher(), logprobs=2)[-1]
    assert any(rows == n > 1 for n, rows in asked[1:])
    asked.clear()
    ctx.clear()
    batched = reply(Generator.alone(ctx), people.matcher())[-1]
    assert batched.token_ids == checked.token_ids
    prompt = asked.pop(0)  # the prompt: its last token's logits
    assert prompt[1] == "last" and len(asked) > 5
    assert all(rows == 1 for _, rows in asked)  # forced runs: the row after the last one


def test_sampled_replies_follow_the_schema_too(smol, people):
    gen = Generator.alone(LlamaSequence(smol, ContextParams(n_ctx=1024)))
    for seed in range(3):
        done = reply(gen, people.matcher(), SamplingParams(temperature=1.0, seed=seed,
                                                           max_tokens=150))[-1]
        if done.reason == "stop":
            jsonschema.validate(json.loads(done.text), PEOPLE)
        else:
            assert done.reason == "length"  # cut before the document closed: said so


def test_a_reply_cut_by_max_tokens_says_length(smol, people):
    gen = Generator.alone(LlamaSequence(smol, ContextParams(n_ctx=1024)))
    done = reply(gen, people.matcher(), SamplingParams(temperature=0, max_tokens=6))[-1]
    assert done.reason == "length" and done.stats.n_tokens <= 6


def test_a_gbnf_grammar_and_logprobs(smol):
    g = Grammar.compile(smol, "gbnf", 'root ::= ("yes" | "no") "."')
    gen = Generator.alone(LlamaSequence(smol, ContextParams(n_ctx=1024)))
    events = reply(gen, g.matcher(), text="Is the sea wet? Answer yes or no.", logprobs=3)
    done = events[-1]
    assert done.text in ("yes.", "no.") and done.reason == "stop"
    tokens = [e for e in events if isinstance(e, Token)]
    assert all(e.logprob is not None and len(e.logprob.top) == 3 for e in tokens)
    assert all(e.logprob.logprob <= 0 and e.logprob.top[0][1] >= e.logprob.top[-1][1]
               for e in tokens)


@pytest.mark.parametrize("kind, text, says", [
    ("json_schema", {"type": "object", "properties": {"a": {"type": "nope"}}}, "JSON schema"),
    ("json_schema", "[1, 2", "JSON schema"),
    ("json_schema", 5, "must be an object"),
    ("json_schema", {"enum": list(range(2000))}, "alternatives"),
    ("json_schema", {"anyOf": [{"const": i} for i in range(1100)]}, "alternatives"),
    ("gbnf", "root ::= (", "grammar"),
    ("gbnf", "x" * (300 << 10), "larger than"),
])
def test_unusable_grammars_are_refused_in_one_line(smol, kind, text, says):
    with pytest.raises(GrammarError, match=says) as e:
        Grammar.compile(smol, kind, text)
    assert "\n" not in str(e.value)


def test_a_schema_nested_too_deep_is_refused_before_compiling():
    schema: dict = {"type": "string"}
    for _ in range(40):
        schema = {"type": "array", "items": schema}
    with pytest.raises(GrammarError, match="deeper"):
        check_schema(schema)


def test_a_pattern_built_to_backtrack_stays_within_a_fixed_budget_per_token(smol):
    """A backtracking regex engine needs exponential work for (a+)+$ against "aaaa…b"; the
    grammar's engine is derivative-based. Every step below runs under the same fixed fuel
    budget per mask (engine.decode.constraint._LIMITS): a thousand steps succeed, so the work per
    token does not grow with the input, and the final "b" is refused."""
    g = Grammar.compile(smol, "json_schema", {"type": "string", "pattern": "^(a+)+$"})
    m = g.matcher()
    a = smol.tokenize('"', add_special=False, parse_special=False)
    for t in a:
        m.advance(t)
    single_a = smol.tokenize("a", add_special=False, parse_special=False)
    assert len(single_a) == 1
    for _ in range(1000):
        mask = m.mask()
        assert mask[single_a[0]] and m.failed is None
        m.advance(single_a[0])
    b = smol.tokenize("b", add_special=False, parse_special=False)[0]
    assert not m.allows(b) and m.failed is None


def test_the_vocabulary_is_prepared_in_steps_and_gives_the_same_tokenizer(smol_path):
    """Idle work in small steps (a request waits for one, not for the whole build); the
    bytes gathered in steps are those gathered at once."""
    from engine.decode import constraint
    from engine.llama.model import Model

    model = Model(smol_path)
    try:
        steps = 0
        while constraint.prepare(model):
            steps += 1
            assert not constraint.is_prepared(model) and steps < 1000
        assert steps == -(-model.n_vocab // constraint.PREPARE_STEP)
        assert constraint.is_prepared(model)
        assert not constraint.prepare(model)  # once built, nothing more
        assert constraint._token_bytes(model, 0, model.n_vocab) == [
            constraint._token_bytes(model, t, t + 1)[0] for t in range(model.n_vocab)]
        grammar = constraint.Grammar.compile(model, "json_schema", {"type": "boolean"})
        assert grammar.matcher() is not None
    finally:
        model.close()


def test_the_build_waits_while_anything_else_arrives(smol_path):
    """llguidance's own build cannot be stopped: it runs only after the engine's preempt (set by
    any request or load in the process) stayed clear for BUILD_CALM_S, else it is left for
    later."""
    from engine.decode import constraint
    from engine.llama.model import Model

    model = Model(smol_path)
    try:
        arrived = threading.Event()
        arrived.set()  # a request came while the vocabulary's last step was done
        while len(constraint._pieces.get(id(model), ())) < model.n_vocab:
            assert constraint.prepare(model, arrived)
        assert constraint.prepare(model, arrived)  # the build waits
        assert not constraint.is_prepared(model)
        arrived.clear()
        with mock.patch.object(constraint, "BUILD_CALM_S", 0.0):
            assert not constraint.prepare(model, arrived)
        assert constraint.is_prepared(model)
    finally:
        model.close()
