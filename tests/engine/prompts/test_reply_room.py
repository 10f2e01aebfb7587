"""The room kept for the reply past the context's edge (issue 59): the oldest turn kept only
moves forward, whatever each reply's max_tokens, so the cache always holds the next prompt's
history (shifted past the dropped turns)."""

from __future__ import annotations

from engine.cache.prefix import common_prefix, dropped_span
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.prompts.request import Chat, Policy, prepare

N_CTX = 512


def _turns(n: int) -> list[Message]:
    out = [Message("system", "You are a helpful assistant.")]
    for i in range(n):
        out.append(Message("user", f"Turn {i}. Tell me four short facts about topic {i}."))
        facts = " ".join(f"Fact {k} about topic {i} is short." for k in range(4))
        out.append(Message("assistant", facts))
    return out


def test_a_short_reply_after_a_long_one_never_brings_back_a_dropped_turn(smol) -> None:
    history = _turns(12)
    long = prepare(smol, Chat(tuple(history) + (Message("user", "Go on."),),
                              SamplingParams(temperature=0, max_tokens=200)), Policy(N_CTX))
    assert long.dropped > 0  # past the edge
    cached = list(long.prompt) + smol.tokenize_text("Fact 0 about the reply.")
    history += [Message("user", "Go on."), Message("assistant", "Fact 0 about the reply.")]
    short = prepare(smol, Chat(tuple(history) + (Message("user", "And one more?"),),
                               SamplingParams(temperature=0, max_tokens=30)), Policy(N_CTX))
    assert short.dropped >= long.dropped
    # what the cache holds after the long reply is most of the short one's prompt: as it is,
    # or shifted past the turns dropped (the target: >= 80% reused)
    span = dropped_span(cached, short.prompt)
    reused = span[0] + span[2] if span is not None else common_prefix(cached, short.prompt)
    assert reused >= 0.8 * len(short.prompt)
