"""Integration on the real SmolLM2-135M: determinism, prefix reuse, rewind, cancel, stops, EOG."""

import threading

import pytest

from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.errors import ContextFullError, ModelLoadError
from engine.events import Done, PromptProgress, Token
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model
from engine.runtime.generate import Generator

GREEDY = SamplingParams(temperature=0, max_tokens=40)


def run(gen, messages, params=GREEDY, cancel=None):
    events = list(gen.chat(messages, params, cancel))
    assert isinstance(events[-1], Done)
    return events


def fresh(model, n_ctx=1024):
    return Generator.alone(LlamaSequence(model, ContextParams(n_ctx=n_ctx)))


def test_model_facts(smol):
    assert smol.n_vocab == 49152 and smol.architecture == "llama"
    assert smol.eos in smol.eog_ids and smol.is_eog(smol.eos)
    assert "im_start" in smol.chat_template
    assert smol.detokenize(smol.tokenize("Hello world", add_special=False)) == "Hello world"


def test_a_base_model_continues_the_text(gemma):
    """Gemma 3 270M has no chat template: the message is a raw prompt it continues (through
    ChatML it answered "Say hello." with ``Say hello.<|im_end``)."""
    with LlamaSequence(gemma, ContextParams(n_ctx=256)) as ctx:
        done = run(Generator.alone(ctx), [Message("system", "Be brief."), Message("user", "Say hello.")],
                   SamplingParams(temperature=0, max_tokens=8))[-1]
        assert ctx.tokens[:len(gemma.tokenize("Say hello."))] == gemma.tokenize("Say hello.")
    assert done.reason in ("stop", "length") and "<|im_" not in done.text


def test_not_gguf_and_missing_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 100)
    with pytest.raises(ModelLoadError, match="not a GGUF"):
        Model(bad)
    with pytest.raises(ModelLoadError, match="not found"):
        Model(tmp_path / "missing.gguf")
    truncated = tmp_path / "trunc.gguf"
    truncated.write_bytes(b"GGUF" + b"\x03\0\0\0" + b"\xff" * 40)
    with pytest.raises(ModelLoadError, match="cannot load"):
        Model(truncated)


def test_greedy_is_deterministic_across_contexts(smol):
    msgs = [Message("user", "Name three colours.")]
    a = run(fresh(smol), msgs)[-1]
    b = run(fresh(smol), msgs)[-1]
    assert a.token_ids == b.token_ids and a.text == b.text and a.stats.n_tokens > 3


def test_events_stream_text_equals_done_text(smol):
    events = run(fresh(smol), [Message("user", "Say hello in French.")])
    text = "".join(e.text for e in events if isinstance(e, Token)) + events[-1].tail
    assert text == events[-1].text
    assert any(isinstance(e, PromptProgress) for e in events)


def test_continued_conversation_reuses_prefix_and_matches_cold_run(smol, same_tokens):
    gen = fresh(smol)
    turn1 = [Message("user", "What is the capital of France?")]
    d1 = run(gen, turn1)[-1]
    turn2 = turn1 + [Message("assistant", d1.text), Message("user", "And of Italy?")]
    warm = run(gen, turn2)[-1]
    cold = run(fresh(smol), turn2)[-1]
    assert warm.stats.n_cached_tokens > d1.stats.n_prompt_tokens  # the first reply was not redone
    same_tokens(smol, chat_tokens(smol, turn2), warm.token_ids, cold.token_ids)


def test_regenerate_after_rewind_gives_same_tokens(smol):
    gen = fresh(smol)
    msgs = [Message("user", "Count from one to five.")]
    first = run(gen, msgs)[-1]
    assert gen.ctx.n_past == first.stats.n_prompt_tokens + first.stats.n_tokens - 1
    assert gen.ctx.kv_pos_max() == gen.ctx.n_past - 1  # mirror in lockstep with llama.cpp
    again = run(gen, msgs)[-1]
    assert again.stats.n_cached_tokens == first.stats.n_prompt_tokens - 1
    assert again.token_ids == first.token_ids


def test_edit_rewinds_to_common_prefix(smol, same_tokens):
    gen = fresh(smol)
    run(gen, [Message("system", "You are terse."), Message("user", "Describe a cat.")])
    edited = run(gen, [Message("system", "You are terse."), Message("user", "Describe a dog.")])[-1]
    cold = run(fresh(smol), [Message("system", "You are terse."), Message("user", "Describe a dog.")])[-1]
    assert 0 < edited.stats.n_cached_tokens < edited.stats.n_prompt_tokens
    same_tokens(smol, chat_tokens(smol, [Message("system", "You are terse."), Message("user", "Describe a dog.")]),
                            edited.token_ids, cold.token_ids)


def test_stop_string_ends_reply_and_never_leaks(smol):
    msgs = [Message("user", "Count from one to ten, separated by commas.")]
    free = run(fresh(smol), msgs, SamplingParams(temperature=0, max_tokens=60))[-1]
    words = free.text.split()
    assert len(words) > 4
    word = words[3]  # a stop string that arrives mid-reply
    stopped = run(fresh(smol), msgs, SamplingParams(temperature=0, max_tokens=60, stop=(word,)))[-1]
    assert stopped.reason == "stop" and word not in stopped.text
    assert stopped.text == free.text[: free.text.index(word)]


def test_eog_ends_with_stop_and_is_not_text(smol):
    done = run(fresh(smol), [Message("user", "Say OK.")], SamplingParams(temperature=0, max_tokens=200))[-1]
    assert done.reason == "stop" and smol.is_eog(done.token_ids[-1])
    assert "<|im_end|>" not in done.text


def test_max_tokens_gives_length(smol):
    done = run(fresh(smol), [Message("user", "Write a long story.")], SamplingParams(temperature=0, max_tokens=7))[-1]
    assert done.reason == "length" and done.stats.n_tokens == 7


def test_cancel_from_another_thread_within_one_token(smol):
    """Cancel is set (from another thread) while the consumer holds token 5: the loop checks it
    before the next target pass, so without drafts the reply ends at exactly 5 tokens."""
    gen = fresh(smol)
    cancel = threading.Event()
    n = 0
    for ev in gen.chat([Message("user", "Write a long story about a dragon.")],
                       SamplingParams(temperature=0, max_tokens=500), cancel):
        if isinstance(ev, Token):
            n += 1
            if n == 5:
                setter = threading.Thread(target=cancel.set)
                setter.start()
                setter.join()
        last = ev
    assert last.reason == "cancelled" and last.stats.n_tokens == 5
    # the cache is consistent and the conversation goes on
    assert gen.ctx.kv_pos_max() == gen.ctx.n_past - 1
    assert run(gen, [Message("user", "Hi")])[-1].stats.n_tokens > 0


def test_cancel_during_prompt_processing(smol):
    gen = fresh(smol, n_ctx=4096)
    cancel = threading.Event()
    cancel.set()
    long = " ".join(["word"] * 1500)
    last = list(gen.chat([Message("user", long)], GREEDY, cancel))[-1]  # while fitting it
    assert last.reason == "cancelled" and last.stats.n_tokens == 0 and gen.ctx.n_past == 0
    tokens = chat_tokens(smol, [Message("user", long)])
    last = list(gen.complete(tokens, GREEDY, cancel))[-1]  # while decoding the prompt
    assert last.reason == "cancelled" and last.stats.n_tokens == 0
    assert gen.ctx.kv_pos_max() == gen.ctx.n_past - 1


def test_seeded_sampling_reproducible(smol):
    p = SamplingParams(temperature=0.9, seed=7, max_tokens=30)
    msgs = [Message("user", "Invent a name for a boat.")]
    assert run(fresh(smol), msgs, p)[-1].token_ids == run(fresh(smol), msgs, p)[-1].token_ids


def test_full_context_is_clear_error_then_oldest_turns_dropped(smol):
    gen = fresh(smol, n_ctx=128)
    with pytest.raises(ContextFullError, match="too long"):
        gen.chat([Message("user", "word " * 400)], GREEDY)
    assert gen.ctx.n_past == 0  # nothing was decoded
    msgs = []
    for i in range(10):
        msgs += [Message("user", f"Question number {i} about the weather in town."),
                 Message("assistant", "It is sunny today with a light breeze from the west.")]
    msgs.append(Message("user", "And tomorrow?"))
    full = len(chat_tokens(smol, msgs))
    assert full > gen.ctx.n_ctx  # (llama.cpp rounds the context up to 256)
    done = run(gen, msgs, SamplingParams(temperature=0, max_tokens=20))[-1]
    assert done.stats.n_prompt_tokens <= gen.ctx.n_ctx - 20 and done.reason in ("stop", "length")


def test_generation_stops_cleanly_when_context_fills(smol):
    """A prompt a few tokens short of the context: the reply runs into the end of the context
    (a run of the same word gives the model no reason to stop) and ends as context_full."""
    gen = fresh(smol, n_ctx=256)
    n_ctx = gen.ctx.n_ctx
    prompt = smol.tokenize("word" + " word" * 400, add_special=False)[:n_ctx - 6]
    done = list(gen.complete(prompt, SamplingParams(temperature=0, max_tokens=500)))[-1]
    assert done.reason == "context_full"
    assert done.stats.n_tokens == n_ctx - len(prompt) + 1  # each decoded; the last only sampled
    assert gen.ctx.n_past == n_ctx and gen.ctx.kv_pos_max() == n_ctx - 1


def test_rewind_and_decode_keep_positions(smol_ctx):
    toks = smol_ctx.model.tokenize("The quick brown fox jumps over the lazy dog")
    smol_ctx.decode(toks)
    full = smol_ctx.logits().copy()
    smol_ctx.rewind(3)
    assert smol_ctx.n_past == 3 and smol_ctx.kv_pos_max() == 2
    smol_ctx.decode(toks[3:])
    assert (smol_ctx.logits() == full).all() or abs(smol_ctx.logits() - full).max() < 1e-3
    with pytest.raises(ContextFullError):
        smol_ctx.decode([1] * 2000)
    assert smol_ctx.n_past == len(toks)


def test_vocab_only_model_loads_without_weights(smol_path):
    from engine.llama.model import ModelSpec

    with Model(ModelSpec(smol_path, vocab_only=True)) as m:
        assert m.n_vocab == 49152 and m.n_layer == 0 and not m.can_rewind
        assert m.tokenize("Hello", add_special=False)
