"""Can this draft model propose tokens for that target? (the checks llama.cpp makes, asked in
the order of ``engine.models.pair_reasons``, which words the reasons)"""

from __future__ import annotations

from engine.llama.model import Model
from engine.models import pair_reasons as why

VOCAB_SIZE_SLACK = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
FIRST_CHECKED_TOKEN = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID


def check_pair(target: Model, draft: Model) -> str | None:
    """None when ``draft`` can draft for ``target``; else the first reason it cannot, one line."""
    t, d = target, draft
    if abs(t.n_vocab - d.n_vocab) > VOCAB_SIZE_SLACK:
        return why.vocabulary_size(t.n_vocab, d.n_vocab)
    if t.vocab_type != d.vocab_type:
        return why.tokenizer(t.vocab_type, d.vocab_type)
    if t.add_bos != d.add_bos or (t.add_bos and t.bos != d.bos):
        return why.start_of_text((t.add_bos, t.bos), (d.add_bos, d.bos))
    if t.eos != d.eos:
        return why.end_of_text(t.eos, d.eos)
    if t.eog_ids != d.eog_ids:
        return why.end_of_generation()
    for tok in range(FIRST_CHECKED_TOKEN, min(t.n_vocab, d.n_vocab)):
        if t.token_text(tok) != d.token_text(tok):
            return why.token_text(tok, t.token_text(tok), d.token_text(tok))
    return None
