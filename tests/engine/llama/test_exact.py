"""Batch-invariant decoding (patches/ggml-exact.patch, ContextParams.exact): a token's logits
depend only on the tokens before it, never on the batch it was read in nor on how long the
cache is. Without the patch the K-quant models here differ by 0.3-0.8 in a logit."""

from __future__ import annotations

import numpy as np
import pytest

from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams

TEXT = ("Rivers carry water, sediment and nutrients from the mountains to the sea. "
        "People have settled beside them for as long as there have been towns. ") * 24


def _read(model, tokens, splits, n_ctx=2048):
    """The last token's logits after reading ``tokens`` in batches of ``splits``, then every
    row's logits of the last batch (what a verify pass reads)."""
    with LlamaSequence(model, ContextParams(n_ctx=n_ctx)) as ctx:
        pos = 0
        for i, n in enumerate(splits):
            ctx.decode(tokens[pos:pos + n], logits="all" if i == len(splits) - 1 else "last")
            pos += n
        assert pos == len(tokens)
        return np.array(ctx.logits_rows(), copy=True)


@pytest.mark.parametrize("which", ["qwen_draft", "gemma"])
def test_a_token_reads_the_same_in_any_batch(which, request):
    """One batch, n-1 then 1, n-7 then 7 (a verify pass), 5 then the rest: the same bits, for
    the tiled K-quant matmul (8+ rows) and the one-row kernels alike."""
    model = request.getfixturevalue(which)
    tokens = model.tokenize_text(TEXT)[:120]
    n = len(tokens)
    whole = _read(model, tokens, [n])  # every row's logits
    assert np.array_equal(_read(model, tokens, [n - 1, 1])[-1], whole[-1])
    seven = _read(model, tokens, [n - 7, 7])
    assert np.array_equal(seven, whole[-7:])  # every row of the verify batch
    assert np.array_equal(_read(model, tokens, [5, n - 5])[-1], whole[-1])


def test_a_long_cache_reads_one_token_as_a_batch_does(qwen_draft):
    """Past 512 cells flash attention took a split-KV path for one query and a tiled one for
    a batch: decoding steps one by one gives what one batch gives."""
    tokens = qwen_draft.tokenize_text(TEXT)[:600]
    batch = _read(qwen_draft, tokens, [len(tokens) - 6, 6])
    steps = _read(qwen_draft, tokens, [len(tokens) - 6, 1, 1, 1, 1, 1, 1])
    assert np.array_equal(steps[-1], batch[-1])
