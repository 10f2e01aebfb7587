"""A conversation at its context's edge (issue 59): once its oldest turns are dropped and the
cache shifted, the KV state it saves still reopens, so the next turn reads only what is new."""

from __future__ import annotations

from pathlib import Path

import engine.chat.fit
from engine.chat.messages import Message
from engine.conversation.session import store
from engine.llama.context import Context
from engine.llama.context_params import ContextParams
from engine.llama.model import Model


def test_a_shifted_cache_saves_a_state_that_reopens(smol_path, tmp_path):
    """A cache shift leaves holes where the dropped turns were, and the next tokens fill them
    (some stay empty); a restore lays the cells out anew, without holes. With exact decoding
    (flash attention, the default) the restored state predicts what the saved one did.

    With exact decoding off (plain attention on the CPU) the sums depend on the cells' layout;
    laying them out before the check (engine.conversation.session.store._capture) passes some
    shapes of this test and not others (2 or 3 of 5 starting points fail, issue 59): the state
    is then refused, the conversation reopens from its text and nothing is lost, which
    test_an_unusable_state_falls_back_to_the_text checks."""
    text = Path(engine.chat.fit.__file__).read_text()
    exact = True
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


def test_an_unusable_state_falls_back_to_the_text(smol_path, tmp_path):
    """Exact decoding off, at the context's edge: whether or not the saved state passes its
    check (see above), the conversation reopens whole and the context holds either the state or
    nothing (its text is read again), never a state that predicts otherwise."""
    text = Path(engine.chat.fit.__file__).read_text()
    params = ContextParams(n_ctx=512, exact=False)
    messages = [Message("user", "x"), Message("assistant", "y")]
    with Model(smol_path) as model:
        tokens = model.tokenize_text(text)
        for start in (400, 420, 440):
            path = tmp_path / f"plain{start}.duet"
            with Context(model, params) as ctx, Context(model, params) as again:
                assert not ctx.flash_attn
                ctx.decode(tokens[:start], logits="none")
                assert ctx.drop(20, 140)
                ctx.decode(tokens[start:start + 100])
                store.save_contexts(path, ctx, None, messages, settings={})
                opened = store.open_contexts(path, again)
                assert [(m.role, m.content) for m in opened.messages] == [("user", "x"), ("assistant", "y")]
                if opened.restored_kv:
                    assert again.tokens == ctx.tokens
                else:
                    assert again.tokens == [] and "processed again" in (opened.note or "")
