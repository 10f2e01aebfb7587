"""A conversation at its context's edge (issue 59): once its oldest turns are dropped and the
cache shifted, the KV state it saves still reopens, so the next turn reads only what is new."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine.chat.fit
from engine.chat.messages import Message
from engine.conversation.session import store
from engine.decode.sampling import SamplingParams
from engine.events import Done
from engine.llama.context import Context
from engine.llama.context_params import ContextParams
from engine.llama.model import Model, ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "plain-attention"])
def test_a_shifted_cache_saves_a_state_that_reopens(smol_path, tmp_path, exact):
    """A cache shift leaves holes where the dropped turns were, and the next tokens fill them
    (some stay empty); a restore lays the cells out anew, without holes, and its check decodes
    the last tokens again. With exact decoding (flash attention, the default) the sums do not
    depend on the cells' layout. With it off (plain attention on the CPU) they do: the saved
    state is laid out as a restore lays it out, its last tokens where the check puts them
    (engine.conversation.session.store._capture). Before that, 2 of 5 starting points here
    failed their check with exact decoding off, and the turn read its whole prompt again."""
    text = Path(engine.chat.fit.__file__).read_text()
    params = ContextParams(n_ctx=512, exact=exact)
    with Model(smol_path) as model:
        tokens = model.tokenize_text(text)
        assert len(tokens) > 600
        for start in (400, 410, 420, 430, 440):
            path = tmp_path / f"edge{start}.duet"
            with Context(model, params) as ctx, Context(model, params) as again:
                assert ctx.flash_attn == exact
                ctx.decode(tokens[:start], logits="none")
                assert ctx.drop(20, 140)  # the oldest turns, dropped to fit
                ctx.decode(tokens[start:start + 100])  # into the holes, 20 of them left
                assert len(ctx.tokens) == start - 20
                store.save_contexts(path, ctx, None, [Message("user", "x")], settings={})
                opened = store.open_contexts(path, again)
                assert opened.restored_kv, (start, opened.note)
                assert again.tokens == ctx.tokens


def test_each_turn_past_the_context_reopens_its_state_with_plain_attention(smol_path, tmp_path):
    """The command line's path (``generate --session``: the saved state restored before each
    turn) at 512 cells with exact decoding off, replies of 90, 40, 140, 60, 200 and 30 tokens at
    most (bench edge's). Turn 11 here failed its check before: the cache had wrapped, so the last
    tokens sat mid-sequence even after laying the cells out, and the check moved them."""
    from bench.edge import message  # the bench's turns, so that the test sees its edge

    config = RuntimeConfig(target=ModelSpec(smol_path), kv_store_bytes=0, state_cache_bytes=0,
                           context=ContextParams(n_ctx=512, exact=False))
    path = tmp_path / "edge.duet"
    messages = [Message("system", "You are a helpful assistant.")]
    with Runtime(config) as rt:
        for i in range(12):
            if i:
                opened = store.open_conversation(path, rt)
                assert opened.restored_kv, (i + 1, opened.note)
            messages.append(Message("user", message(i)))
            params = SamplingParams(temperature=0, max_tokens=(90, 40, 140, 60, 200, 30)[i % 6])
            done = [e for e in rt.generator.chat(messages, params) if isinstance(e, Done)][0]
            messages.append(Message("assistant", done.text))
            store.save_conversation(path, rt, messages, settings={})
