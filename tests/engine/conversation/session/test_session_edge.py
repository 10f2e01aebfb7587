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
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model, ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "plain-attention"])
@pytest.mark.parametrize("steps", [False, True], ids=["one-pass", "token-by-token"])
def test_a_shifted_cache_saves_a_state_that_reopens(smol_path, tmp_path, exact, steps):
    """A cache shift leaves holes where the dropped turns were. Read in one pass, the next
    tokens fill them in order (some stay empty); decoded one at a time, as a reply is, they run
    to the cache's end first and then wrap into the holes, mid-sequence. A restore lays the
    cells out anew, without holes, and its check decodes the last tokens again after the
    sequence's last cell: in the live cache they would land in a hole, in the restored one
    after every cell. Attention sums a sequence's cells in their order (flash attention, the
    exact default, skips holes; plain attention sums over them too), so the saved state is laid
    out as a restore lays it out, its last tokens where the check puts them
    (engine.conversation.session.store._capture). Before that, with exact decoding, every
    token-by-token case here failed its check and the turn read its whole prompt again
    (issue 72); with plain attention 2 of 5 one-pass cases did (issue 59)."""
    text = Path(engine.chat.fit.__file__).read_text()
    params = ContextParams(n_ctx=512, exact=exact)
    with Model(smol_path) as model:
        tokens = model.tokenize_text(text)
        assert len(tokens) > 700
        for start in (400, 410, 420, 430, 440):
            path = tmp_path / f"edge{start}.duet"
            with LlamaSequence(model, params) as ctx, LlamaSequence(model, params) as again:
                assert ctx.flash_attn == exact
                ctx.decode(tokens[:start], logits="none")
                assert ctx.drop(20, 140)  # the oldest turns, dropped to fit
                if steps:  # to the cache's end, then into the holes
                    for t in tokens[start:start + 500 - len(ctx.tokens)]:
                        ctx.decode([t])
                    assert len(ctx.tokens) == 500
                else:
                    ctx.decode(tokens[start:start + 100])  # into the holes, 20 of them left
                    assert len(ctx.tokens) == start - 20
                store.save_contexts(path, ctx, None, [Message("user", "x")], settings={})
                opened = store.open_contexts(path, again)
                assert opened.restored_kv, (start, opened.note)
                assert again.tokens == ctx.tokens


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "plain-attention"])
def test_each_turn_past_the_context_reopens_its_state(smol_path, tmp_path, exact):
    """The command line's path (``generate --session``: the saved state restored before each
    turn) at 512 cells, replies of 90, 40, 140, 60, 200 and 30 tokens at most (bench edge's).
    With plain attention turn 11 here failed its check before: the cache had wrapped, so the
    last tokens sat mid-sequence even after laying the cells out, and the check moved them.
    With exact decoding every other turn past the context failed it (issue 72), until the state
    was laid out before its check there too."""
    from bench.edge import message  # the bench's turns, so that the test sees its edge

    config = RuntimeConfig(target=ModelSpec(smol_path), kv_store_bytes=0, state_cache_bytes=0,
                           context=ContextParams(n_ctx=512, exact=exact))
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
