"""Can this draft model propose tokens for that target? (the checks llama.cpp makes)"""

from __future__ import annotations

from engine.model import Model

VOCAB_SIZE_SLACK = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
FIRST_CHECKED_TOKEN = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID


def check_pair(target: Model, draft: Model) -> str | None:
    """None when ``draft`` can draft for ``target``; else the first reason it cannot, one line."""
    t, d = target, draft
    if t.vocab_type != d.vocab_type:
        return f"different tokenizer types ({t.vocab_type} vs {d.vocab_type})"
    if t.add_bos != d.add_bos or (t.add_bos and t.bos != d.bos):
        return f"different start-of-text handling (BOS {t.bos} vs {d.bos})"
    if t.eos != d.eos:
        return f"different end-of-text tokens ({t.eos} vs {d.eos})"
    if t.eog_ids != d.eog_ids:
        return "different end-of-generation tokens"
    if abs(t.n_vocab - d.n_vocab) > VOCAB_SIZE_SLACK:
        return f"vocabulary sizes differ too much ({t.n_vocab} vs {d.n_vocab})"
    for tok in range(FIRST_CHECKED_TOKEN, min(t.n_vocab, d.n_vocab)):
        if t.token_text(tok) != d.token_text(tok):
            return f"token {tok} differs ({t.token_text(tok)[:20]!r} vs {d.token_text(tok)[:20]!r})"
    return None
