"""Batch-invariant decoding (patches/ggml-exact.patch, ContextParams.exact): a token's logits
depend only on the tokens before it, never on the batch it was read in nor on how long the
cache is. Without the patch the K-quant models here differ by 0.3-0.8 in a logit."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from engine.llama import exactness
from engine.llama.context import LlamaSequence
from engine.llama.context_params import ContextParams
from engine.llama.model import Model, ModelSpec, for_decoding
from tests.conftest import model_path

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


@pytest.mark.parametrize("key", ["draft", "gemma"])
def test_repacked_weights_read_a_token_the_same_in_any_batch(key, caplog):
    """Exact decoding repacks the Q4_K weights on x86 (ModelSpec.repack "exact"): groups of 4 rows
    go through the repacked GEMM and the rest through its GEMV, which add each block up alike."""
    assert exactness.repacks_exactly()  # a patched x86 build has the switch
    with caplog.at_level(logging.DEBUG, logger="engine.llama.backend"), \
            Model(for_decoding(ModelSpec(model_path(key)), exact=True)) as model:
        assert model.spec.repack == "exact" and "CPU_REPACK model buffer" in caplog.text
        tokens = model.tokenize_text(TEXT)[:120]
        n = len(tokens)
        whole = _read(model, tokens, [n])
        for splits in ([n - 1, 1], [n - 7, 7], [n - 6, 6], [5, n - 5]):  # (GEMM rows, GEMV rows)
            rows = _read(model, tokens, splits)  # every row of the last batch
            assert np.array_equal(rows, whole[-len(rows):]), splits


def test_a_long_cache_reads_one_token_as_a_batch_does(qwen_draft):
    """Past 512 cells flash attention took a split-KV path for one query and a tiled one for
    a batch: decoding steps one by one gives what one batch gives."""
    tokens = qwen_draft.tokenize_text(TEXT)[:600]
    batch = _read(qwen_draft, tokens, [len(tokens) - 6, 6])
    steps = _read(qwen_draft, tokens, [len(tokens) - 6, 1, 1, 1, 1, 1, 1])
    assert np.array_equal(steps[-1], batch[-1])
