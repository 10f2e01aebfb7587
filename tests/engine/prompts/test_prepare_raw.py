"""Raw prompts (/v1/completions, Ollama's raw generate) go through the one request module:
tokenized with their special tokens, checked, given a grammar, fitted, refused in one line."""

from __future__ import annotations

import pytest

from engine.decode.sampling import SamplingParams
from engine.prompts.request import Raw, RequestError, prepare_raw

PARAMS = SamplingParams(temperature=0.0, max_tokens=10_000)


def test_text_is_tokenized_with_its_special_tokens_and_max_tokens_cut_to_the_context(smol):
    turn = prepare_raw(smol, Raw("<|im_start|>user\nhi", PARAMS), 256)
    assert turn.prompt == smol.tokenize("<|im_start|>user\nhi", add_special=True, parse_special=True)
    as_text = smol.tokenize("<|im_start|>user\nhi", add_special=True, parse_special=False)
    assert len(turn.prompt) < len(as_text)  # the marker is one token, not its characters
    assert turn.sampling.max_tokens == 256 - len(turn.prompt) and turn.fmt is None


def test_token_ids_are_used_as_given_and_checked(smol):
    assert prepare_raw(smol, Raw([1, 2, 3], PARAMS), 256).prompt == [1, 2, 3]
    with pytest.raises(RequestError, match="outside the vocabulary") as e:
        prepare_raw(smol, Raw([1, smol.n_vocab], PARAMS), 256)
    assert e.value.field == "prompt"


@pytest.mark.parametrize(("raw", "words", "field"), [
    (Raw("", PARAMS), "the prompt is empty", "prompt"),
    (Raw("word " * 300, PARAMS), "context is 256 tokens", "prompt"),
    (Raw("hi", PARAMS, ("gbnf", "root ::= nothing-defined")), "format:", "format"),
])
def test_refusals_name_the_dialects_field(smol, raw, words, field):
    raw = Raw(raw.prompt, raw.sampling, raw.response, param_names={"response_format": "format"})
    with pytest.raises(RequestError, match=words) as e:
        prepare_raw(smol, raw, 256)
    assert e.value.field == field


def test_a_grammar_is_compiled_for_the_reply(smol):
    turn = prepare_raw(smol, Raw("Say yes:", PARAMS, ("gbnf", 'root ::= "yes"')), 256)
    assert turn.grammar is not None
