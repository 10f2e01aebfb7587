"""How close a call a mismatch was: for a reply under load that parts from the solo reply, the
gap between the two best logits at the token where they part, in a fresh greedy run of the same
prompt on the same model (plain decoding, the whole prompt in one batch). A gap of a few tenths
of a logit or less is a near-tie that batch-shape numerics (a prompt prefilled in other pieces
after a cache reuse, a draft verified in one batch) can flip; a large one would be a bug."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from bench.client import HttpReply
from bench.soak import plan
from bench.timing import first_difference
from engine.chat.fit import chat_tokens
from engine.chat.messages import Message
from engine.decode.speculative.params import SpeculativeParams
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model

if TYPE_CHECKING:
    from engine.runtime.runtime import Runtime

log = logging.getLogger(__name__)


def margins(model: str, n_ctx: int, solo: dict[str, HttpReply],
            mismatched: dict[str, dict[str, int]], seen: dict[str, set[str]],
            limit: int = 50) -> list[dict]:

    by_id = {t.id: t for t in plan.turns()}
    texts = {k: r.text for k, r in solo.items()}
    cases = sorted(((n, turn, text) for turn, d in mismatched.items() for text, n in d.items()),
                   reverse=True)[:limit]
    if not cases:
        return []
    rt = Runtime(RuntimeConfig(target=ModelSpec(resolve_model(model)),
                               context=ContextParams(n_ctx=n_ctx, n_threads=1),
                               speculative=SpeculativeParams(drafter="none")))
    out = []
    try:
        for n, turn_id, text in cases:
            turn = by_id[turn_id]
            if turn.path == plan.CHAT:
                prompt = chat_tokens(rt.target, [Message(m["role"], m["content"])
                                                 for m in plan.history(turn, texts)])
            else:
                prompt = rt.target.tokenize(turn.prompt, add_special=True, parse_special=True)
            at = first_difference(texts[turn_id], text)
            out.append({"turn": turn_id, "count": n, "char": at, "known": text in seen[turn_id],
                        **_gap_at(rt, prompt, at, turn.max_tokens)})
    finally:
        rt.close()
    return out


def unexplained(mismatches: int, cases: list[dict], near_tie: float) -> int:
    """Replies that differ from their solo reply and are neither another solo reply of their
    request nor parted at a near-tie (a gap of at most ``near_tie`` logits)."""
    explained = sum(c["count"] for c in cases
                    if c["known"] or (c["gap"] is not None and c["gap"] <= near_tie))
    return mismatches - explained


def _gap_at(rt: Runtime, prompt: list[int], char: int, max_tokens: int) -> dict:
    """Greedy from ``prompt``: the step whose text first reaches past ``char``, and its top-2 gap."""
    ctx, model = rt.ctx, rt.target
    ctx.clear()
    ctx.decode(prompt)
    tokens: list[int] = []
    for step in range(max_tokens + 8):
        logits = ctx.logits().astype(np.float64)
        top2 = np.argsort(logits)[-2:][::-1]
        gap = float(logits[top2[0]] - logits[top2[1]])
        tokens.append(int(top2[0]))
        if len(model.detokenize(tokens)) > char or model.is_eog(tokens[-1]):
            return {"step": step, "gap": round(gap, 4),
                    "best": [model.piece(int(t)).decode("utf-8", "replace") for t in top2]}
        ctx.decode([tokens[-1]])
    return {"step": None, "gap": None, "best": []}
