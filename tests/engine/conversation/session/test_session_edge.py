"""A conversation at its context's edge (issue 59): once its oldest turns are dropped and the
cache shifted, the KV state it saves still reopens, so the next turn reads only what is new."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine.chat.fit
from engine.chat.messages import Message
from engine.conversation.session import store
from engine.llama.context import Context
from engine.llama.context_params import ContextParams
from engine.llama.model import Model


@pytest.mark.parametrize("exact", [True, False])
def test_a_shifted_cache_saves_a_state_that_reopens(smol_path, tmp_path, exact):
    """A cache shift leaves holes where the dropped turns were, and the next tokens fill them
    (some stay empty); a restore lays the cells out anew, without holes. With plain attention (exact decoding off: flash
    attention off on the CPU) the saved state's check saw other sums after the restore (logits
    0.2-0.3 apart) and rejected the state: the whole prompt was read again."""
    text = Path(engine.chat.fit.__file__).read_text()
    params = ContextParams(n_ctx=512, exact=exact)
    with Model(smol_path) as model:
        tokens = model.tokenize_text(text)
        assert len(tokens) > 600
        for start in (400, 410, 430):
            path = tmp_path / f"edge{start}.duet"
            with Context(model, params) as ctx, Context(model, params) as again:
                assert ctx.flash_attn == exact
                ctx.decode(tokens[:start], logits="none")
                assert ctx.drop(20, 140)  # the oldest turns, dropped to fit
                ctx.decode(tokens[start:start + 100])  # into the holes, 20 of them left
                assert len(ctx.tokens) == start - 20
                store.save_contexts(path, ctx, None, [Message("user", "x")], settings={})
                opened = store.open_contexts(path, again)
                assert opened.restored_kv, opened.note
                assert again.tokens == ctx.tokens
