"""Reasoning models: telling a thinking template from real ones (DeepSeek-R1-Distill-Qwen's and
Qwen3's, tests/data/templates; ChatML, SmolLM2's and Gemma's do not think), the variables they
are rendered with, and the splitter that tells a reply's thinking from its answer."""

from __future__ import annotations

import pytest

from engine.chat import reasoning
from engine.chat.messages import CHATML, Message, render
from engine.chat.think_split import ThinkSplitter, split
from engine.decode.think_budget import ThinkBudget
from tests.reasoning_models import QWEN3, R1, template

HI = [Message("user", "Hi")]


# -- detection ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [R1, QWEN3])
def test_the_real_reasoning_templates_think(name):
    assert reasoning.thinks(template(name))
    assert reasoning.variables(template(name), False) == {"enable_thinking": False}


def test_chatml_smollm2_gemma_and_qwen25_do_not_think(smol, gemma, qwen_draft):
    for t in (CHATML, smol.chat_template, gemma.chat_template, qwen_draft.chat_template, None):
        assert not reasoning.thinks(t)
        assert reasoning.variables(t, True) == {}


def test_r1_opens_the_section_in_its_generation_prompt_unless_told_not_to():
    r1 = template(R1)
    assert render(HI, r1, variables={"enable_thinking": True}).endswith("<｜Assistant｜><think>\n")
    assert reasoning.opens_section(r1, True)
    assert not reasoning.opens_section(r1, False)


def test_the_hugging_face_r1_ending_opens_it_whatever_it_is_told():
    """The Hugging Face file's last line has no enable_thinking (llama.cpp's copy adds it)."""
    r1 = template(R1)
    addition = "{% if not enable_thinking %}{{- '</think>' -}}{% endif %}"
    assert addition in r1
    upstream = r1.replace(addition, "")
    assert reasoning.thinks(upstream) and reasoning.opens_section(upstream, False)


def test_qwen3_answers_an_off_with_an_empty_section():
    q = template(QWEN3)
    assert not reasoning.opens_section(q, True)  # the model opens it itself
    assert render(HI, q, variables={"enable_thinking": False}).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render(HI, q, variables={"enable_thinking": True}).endswith("<|im_start|>assistant\n")


def test_past_replies_lose_their_thinking_in_both_templates():
    past = [Message("user", "Hi"), Message("assistant", "<think>\nsecret plan\n</think>\n\nHello!"),
            Message("user", "Again")]
    for name in (R1, QWEN3):
        text = render(past, template(name), variables={"enable_thinking": True})
        assert "secret plan" not in text and "Hello!" in text


def test_efforts():
    assert reasoning.from_effort(None) == reasoning.Thinking()
    assert reasoning.from_effort("none") == reasoning.OFF
    assert reasoning.from_effort("low") == reasoning.Thinking(True, 512)
    assert reasoning.from_effort("high") == reasoning.Thinking(True, None)
    with pytest.raises(ValueError):
        reasoning.from_effort("max")


# -- the splitter ---------------------------------------------------------------------------
def feed_all(pieces, inside=False):
    s = ThinkSplitter(inside)
    out = [s.feed(p) for p in pieces] + [s.flush()]
    return "".join(r for r, _ in out), "".join(a for _, a in out)


def test_markers_split_across_pieces():
    text = "<think>\nplan it\n</think>\n\nThe answer."
    for cut in range(1, len(text)):
        assert feed_all([text[:cut], text[cut:]]) == ("plan it\n", "The answer."), cut
    assert feed_all(list(text)) == ("plan it\n", "The answer.")


def test_a_reply_that_starts_inside_thinking():
    assert feed_all(["\nhmm, ", "two", " plus three\n</th", "ink>\n\n", "Five."], inside=True) == \
        ("hmm, two plus three\n", "Five.")
    assert split("still thinking </thi", inside=True) == ("still thinking </thi", "")


def test_no_markers_is_all_answer():
    assert feed_all(["Hello", " there", " <b>"]) == ("", "Hello there <b>")
    assert split("a <think> later is the answer's") == ("", "a <think> later is the answer's")
    assert split("  <thi") == ("", "  <thi")


def test_only_the_first_section_is_reasoning():
    assert split("<think>a</think>b<think>c</think>d") == ("a", "b<think>c</think>d")


def test_nothing_is_held_back_longer_than_a_marker_could_need():
    s = ThinkSplitter(inside=True)
    assert s.feed("abc <") == ("abc ", "")
    assert s.feed("b>") == ("<b>", "")


# -- the budget's count ---------------------------------------------------------------------
def test_the_budget_closes_the_section_after_its_tokens():
    closing = []
    b = ThinkBudget(3, inside=True, tokenize=lambda text: closing.append(text) or [7, 8])
    for piece in ("one", " two"):
        b.observe(piece)
        assert b.due() == []
    b.observe(" three")
    assert b.due() == [7, 8] and closing == ["\n</think>\n\n"]
    assert b.due() == []  # asked once


def test_a_section_the_model_opens_counts_from_its_marker():
    b = ThinkBudget(2, inside=False, tokenize=lambda text: [1])
    for piece in ("\n<thi", "nk>", "x"):
        b.observe(piece)
        assert b.due() == []
    b.observe("y\n")
    assert b.due() == [1]
    late = ThinkBudget(1, inside=False, tokenize=lambda text: [1])
    for piece in ("Sure", " <think>", "x", "y"):
        late.observe(piece)
        assert late.due() == []  # a marker in the answer opens nothing
    b2 = ThinkBudget(2, inside=False, tokenize=lambda text: [1])
    for piece in ("<think>", "x", "</think>", "a", "b", "c"):
        b2.observe(piece)
        assert b2.due() == []  # closed by the model before its budget
