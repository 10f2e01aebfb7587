"""Conversation caches: a resent conversation re-prefills only what is new, even when two
clients take turns (their states are saved and restored)."""

from __future__ import annotations

SYSTEM_A = ("You are a careful assistant for a team that writes Python. " * 8).strip()
SYSTEM_B = ("You answer questions about the weather in short sentences, never more. " * 8).strip()


def _turn(client, messages):
    r = client.chat.completions.create(model="test", messages=messages, temperature=0, max_tokens=12)
    reply = r.choices[0].message.content
    return reply, r.usage, r.model_extra["timings"]


def test_a_second_turn_reprefills_only_the_new_message(served):
    client = served.client()
    messages = [{"role": "system", "content": SYSTEM_A}, {"role": "user", "content": "What is a list?"}]
    reply, usage1, _ = _turn(client, messages)
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And a tuple?"}]
    _, usage2, timings2 = _turn(client, messages)
    assert timings2["cache_n"] == usage2.prompt_tokens_details.cached_tokens
    assert timings2["prompt_n"] == usage2.prompt_tokens - timings2["cache_n"]
    # Everything up to the first reply comes from the cache; only the reply's closing and the
    # new message are decoded.
    assert timings2["cache_n"] >= usage1.prompt_tokens
    assert timings2["prompt_n"] < usage2.prompt_tokens - usage1.prompt_tokens


def test_two_alternating_clients_reprefill_only_their_new_messages(served):
    client = served.client()
    before = served.engine.stats()["cache"]
    chats = {"a": [{"role": "system", "content": SYSTEM_A}],
             "b": [{"role": "system", "content": SYSTEM_B}]}
    last_prompt = {}
    questions = ["Hello?", "Tell me more.", "Thanks, one last thing?"]
    for turn, question in enumerate(questions):
        for name, messages in chats.items():
            messages.append({"role": "user", "content": f"{question} ({name})"})
            reply, usage, timings = _turn(client, messages)
            messages.append({"role": "assistant", "content": reply})
            if turn > 0:  # the other client ran in between: its state was swapped out and back
                assert timings["cache_n"] >= last_prompt[name], (name, turn, timings)
            last_prompt[name] = usage.prompt_tokens
    after = served.engine.stats()["cache"]
    assert after["restores"] - before["restores"] >= 2 * (len(questions) - 1)
    assert after["hit_rate"] > 0
    status, _, health = served.raw("GET", "/health", key=None)
    assert status == 200 and health["cache_hit_rate"] == after["hit_rate"]
