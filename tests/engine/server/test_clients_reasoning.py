"""Reasoning models over the real clients (openai, anthropic, ollama), on copies of the starter
0.5B that carry DeepSeek-R1-Distill-Qwen's and Qwen3's real chat templates
(tests/reasoning_models.py: no reasoning model can be downloaded here).

R1's template opens the thinking section in the prompt, and a small model rarely closes it: a
budget hit mid-thought must close it (the closing marker forced into the reply) and an answer
must follow, streamed or not. Qwen3's with thinking off gives no reasoning at all."""

from __future__ import annotations

import anthropic
import ollama
import pytest

from tests.conftest import REPLY_WAIT_S, model_path
from tests.engine.server.conftest import API_KEY, start_server
from tests.reasoning_models import QWEN3, R1, template, with_template

ASK = [{"role": "user", "content": "What is 2 + 3?"}]
BUDGET = 8  # the R1 server's default budget
MAX = 40


@pytest.fixture(scope="module")
def reasoners(tmp_path_factory, duet_home):
    """Servers on the 0.5B with R1's template (a default budget of BUDGET) and with Qwen3's."""
    folder = tmp_path_factory.mktemp("reasoners")
    out = {}
    for name, budget in ((R1, BUDGET), (QWEN3, None)):
        path = with_template(model_path("draft"), template(name), folder / f"{name}.gguf")
        out[name] = start_server(path, drafter="none", max_tokens=MAX, reasoning_budget=budget,
                                 alias="test")
    yield {name: handle for name, (_, handle) in out.items()}
    for server, handle in out.values():
        server.close()
        handle.engine.close()


@pytest.fixture(scope="module")
def r1(reasoners):
    return reasoners[R1]


@pytest.fixture(scope="module")
def qwen3(reasoners):
    return reasoners[QWEN3]


def thought_tokens(served, text: str) -> int:
    return len(served.model.tokenize_text(text))


def check_closed(served, reasoning: str, answer: str, budget: int) -> None:
    """The budget ended the thinking (it would have gone on: the model never closes it here)
    and an answer followed."""
    assert reasoning.strip() and "</think>" not in reasoning
    assert abs(thought_tokens(served, reasoning) - budget) <= 2, reasoning
    assert answer.strip(), "no answer followed the closed section"


# -- OpenAI ---------------------------------------------------------------------------------
def test_openai_reasoning_content_closed_by_the_servers_budget(r1):
    c = r1.client()
    whole = c.chat.completions.create(model="test", messages=ASK, max_tokens=MAX, temperature=0)
    msg = whole.choices[0].message
    reasoning = (msg.model_extra or {}).get("reasoning_content", "")
    check_closed(r1, reasoning, msg.content or "", BUDGET)

    parts = {"reasoning_content": [], "content": []}
    for chunk in c.chat.completions.create(model="test", messages=ASK, max_tokens=MAX,
                                           temperature=0, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            parts["content"].append(delta.content or "")
            parts["reasoning_content"].append((delta.model_extra or {}).get("reasoning_content") or "")
    assert "".join(parts["reasoning_content"]) == reasoning
    assert "".join(parts["content"]) == msg.content


def test_openai_reasoning_effort_and_its_budget(r1):
    c = r1.client()

    def ask(**kw):
        msg = c.chat.completions.create(model="test", messages=ASK, max_tokens=MAX, temperature=0,
                                        **kw).choices[0].message
        return (msg.model_extra or {}).get("reasoning_content"), msg.content

    # none: the section is closed in the prompt, the reply is all answer
    off_reasoning, off_answer = ask(reasoning_effort="none")
    assert off_reasoning is None and off_answer.strip()
    # a budget of the request's own beats the server's: minimal is 128 tokens, more than the
    # reply's MAX, which ends it still thinking
    long, answer = ask(reasoning_effort="minimal")
    assert "</think>" not in long and not answer
    assert thought_tokens(r1, long) > BUDGET + 20


# -- Anthropic ------------------------------------------------------------------------------
def client(served) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=served.url, api_key=API_KEY, max_retries=0,
                               timeout=REPLY_WAIT_S)


def test_anthropic_thinking_blocks_closed_by_budget_tokens(r1):
    c = client(r1)
    kw = dict(model="test", messages=ASK, max_tokens=MAX)
    short = c.messages.create(thinking={"type": "enabled", "budget_tokens": 5}, **kw)
    assert [b.type for b in short.content] == ["thinking", "text"]
    check_closed(r1, short.content[0].thinking, short.content[1].text, 5)
    assert isinstance(short.content[0].signature, str)

    longer = c.messages.create(thinking={"type": "enabled", "budget_tokens": 12}, **kw)
    # the same thought, cut later: the budget, not the model, ended it
    assert longer.content[0].thinking.startswith(short.content[0].thinking.rstrip())
    assert len(longer.content[0].thinking) > len(short.content[0].thinking)

    with c.messages.stream(thinking={"type": "enabled", "budget_tokens": 5}, **kw) as stream:
        kinds = [e.content_block.type for e in stream if e.type == "content_block_start"]
        final = stream.get_final_message()
    assert kinds == ["thinking", "text"]
    assert final.content[0].thinking == short.content[0].thinking
    assert final.content[1].text == short.content[1].text


def test_anthropic_thinking_sent_back_is_accepted_and_disabled_means_none(r1):
    c = client(r1)
    first = c.messages.create(model="test", messages=ASK, max_tokens=MAX,
                              thinking={"type": "enabled", "budget_tokens": 5})
    again = c.messages.create(model="test", max_tokens=MAX, thinking={"type": "disabled"},
                              messages=[*ASK, {"role": "assistant", "content": first.content},
                                        {"role": "user", "content": "And 3 + 4?"}])
    assert [b.type for b in again.content] == ["text"] and again.content[0].text.strip()


# -- Ollama ---------------------------------------------------------------------------------
def test_ollama_thinking_closed_by_the_budget(r1):
    c = ollama.Client(host=r1.url, headers={"Authorization": f"Bearer {API_KEY}"})
    whole = c.chat(model="test", messages=ASK, think=True, options={"num_predict": MAX,
                                                                     "temperature": 0})
    check_closed(r1, whole.message.thinking or "", whole.message.content or "", BUDGET)
    thinking, content = [], []
    for part in c.chat(model="test", messages=ASK, think=True, stream=True,
                       options={"num_predict": MAX, "temperature": 0}):
        thinking.append(part.message.thinking or "")
        content.append(part.message.content or "")
    assert "".join(thinking) == whole.message.thinking
    assert "".join(content) == whole.message.content

    gen = c.generate(model="test", prompt="What is 2 + 3?", think=True,
                     options={"num_predict": MAX, "temperature": 0})
    check_closed(r1, gen.thinking or "", gen.response, BUDGET)


# -- Qwen3: thinking off ------------------------------------------------------------------------
def test_qwen3_with_thinking_off_has_no_reasoning(qwen3):
    off = qwen3.client().chat.completions.create(
        model="test", messages=ASK, max_tokens=16, temperature=0, reasoning_effort="none")
    msg = off.choices[0].message
    assert (msg.model_extra or {}).get("reasoning_content") is None and msg.content.strip()
    # the template was told: its empty section "<think>\n\n</think>\n\n" is in the prompt
    default = qwen3.client().chat.completions.create(model="test", messages=ASK, max_tokens=1)
    assert off.usage.prompt_tokens > default.usage.prompt_tokens
    blocks = client(qwen3).messages.create(model="test", messages=ASK, max_tokens=16,
                                           thinking={"type": "disabled"}).content
    assert [b.type for b in blocks] == ["text"]
    c = ollama.Client(host=qwen3.url, headers={"Authorization": f"Bearer {API_KEY}"})
    reply = c.chat(model="test", messages=ASK, think=False,
                   options={"num_predict": 16, "temperature": 0})
    assert not reply.message.thinking and reply.message.content.strip()


def test_responses_reasoning_item_before_the_message(r1):
    r = r1.client().responses.create(model="test", input="What is 2 + 3?",
                                     max_output_tokens=MAX, temperature=0,
                                     reasoning={"effort": "low"}, store=False)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    # low is 512: the server's default does not lower a request's own budget; max_output_tokens
    # ends the reply still thinking, with an empty answer
    assert r.output[0].content[0].text.strip() and r.output_text == ""
    events = list(r1.client().responses.create(
        model="test", input="What is 2 + 3?", max_output_tokens=MAX, temperature=0,
        reasoning={"effort": "low"}, store=False, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas == r.output[0].content[0].text
    assert [o.type for o in events[-1].response.output] == ["reasoning", "message"]
    assert events[-1].type == "response.incomplete"
