"""A model without a chat template (real Gemma 3 270M, a base model): a chat request is refused
in one line (engine.prompts.request), and the window's conversation becomes one text that the
model continues (engine.prompts.completion)."""

from __future__ import annotations

import pytest

from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.prompts.completion import completion_text, completion_turn
from engine.prompts.request import Chat, Policy, RequestError, prepare


def test_a_chat_with_a_base_model_is_refused_in_one_line(gemma, smol):
    assert gemma.chat_template is None and smol.chat_template is not None
    with pytest.raises(RequestError) as refused:
        prepare(gemma, Chat((Message("user", "Say hello."),), SamplingParams()), Policy(2048))
    assert refused.value.code == "no_chat_template" and refused.value.field == "messages"
    assert "no chat template" in str(refused.value) and "\n" not in str(refused.value)
    prepare(smol, Chat((Message("user", "Say hello."),), SamplingParams()), Policy(2048))


def test_a_conversation_is_one_text_to_continue():
    messages = (Message("system", "Be brief."), Message("user", "Once upon a time"),
                Message("assistant", ", there was a fox."), Message("user", "The end"))
    assert completion_text(messages) == "Once upon a time, there was a fox.\n\nThe end"
    assert completion_text(messages[:2], continue_text=" in") == "Once upon a time in"


def test_the_turn_is_the_text_tokenized_as_written_and_keeps_its_end(gemma):
    text = "Once upon a time <start_of_turn>"  # a control token's spelling stays text
    turn = completion_turn(gemma, (Message("user", text),), SamplingParams(max_tokens=9), 256)
    body = gemma.tokenize_text(text)
    assert turn.prompt[-len(body):] == body and turn.sampling.max_tokens == 9
    assert turn.prompt[0] == gemma.bos and turn.grammar is None and turn.fmt is None
    long = completion_turn(gemma, (Message("user", "word " * 400 + "THE END"),),
                           SamplingParams(max_tokens=500), 256)
    assert len(long.prompt) <= 192 and long.prompt[-2:] == gemma.tokenize_text(" THE END")[-2:]
    assert long.sampling.max_tokens == 256 - len(long.prompt)
