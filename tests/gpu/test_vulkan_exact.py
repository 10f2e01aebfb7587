"""Exact decoding on a Vulkan GPU (issue 75; patches/vulkan/batch-invariant.patch): with every
layer on the device and exact decoding asked, a token's logits are the same bits whatever shares
its pass: the rest of its prompt, a verify's other rows, another sequence's tokens between its
cells. As llama.cpp ships it the one-row kernels and the batch kernels sum in other orders
(0.13 apart in a logit on lavapipe, SmolLM2), and so do flash attention's splits.

Skipped in the CPU build's run, saying so (tests/gpu/test_vulkan.py's rule).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from engine.llama import exactness as ex
from engine.llama.devices import gpus
from tests.gpu.serving import ask, at_once, two_sequences

pytestmark = [
    pytest.mark.skipif(not gpus(), reason="no GPU device in this llama.cpp build "
                       "(./test.sh runs these with the Vulkan build where it can)"),
    pytest.mark.timeout(3600),  # a safety net (lavapipe: a GPU's shaders on 2 cores)
]

TEXT = ("Rivers carry water, sediment and nutrients from the mountains to the sea. "
        "People have settled beside them for as long as there have been towns. ") * 4


@pytest.fixture(scope="module")
def device_smol(smol_path):
    from engine.llama.model import Model, ModelSpec

    with Model(ModelSpec(smol_path, n_gpu_layers=-1)) as m:
        yield m


def _params(n_parallel=1):
    from engine.llama.context_params import ContextParams

    return ContextParams(n_ctx=512, n_parallel=n_parallel, exact=True, exact_gpu=True)


def _read(model, tokens, splits, params=None):
    """The logits rows of the last batch after reading ``tokens`` in batches of ``splits``."""
    from engine.llama.context import LlamaSequence

    with LlamaSequence(model, params or _params()) as ctx:
        pos = 0
        for i, n in enumerate(splits):
            ctx.decode(tokens[pos:pos + n], logits="all" if i == len(splits) - 1 else "last")
            pos += n
        return np.array(ctx.logits_rows(), copy=True)


def test_exact_on_the_device_is_asked_for_and_reported(capsys, smol_path):
    """Off unless exact_gpu asks (its cost: docs/benchmarks/gpu.md), then reported exact: in
    the command line's JSON here, and in the server's fingerprint below."""
    from engine.cli.main import main

    assert ex.vulkan_invariant()
    args = ["generate", "--model", str(smol_path), "--gpu-layers", "-1", "--json",
            "--temperature", "0", "--max-tokens", "6", "--drafter", "none", "Name a colour."]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exact"] is False and "exact_gpu" in out["exact_reason"]
    assert main([*args, "--exact-gpu"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exact"] is True and out["exact_reason"] is None and out["n_tokens"] > 0


def test_a_token_reads_the_same_in_any_batch(device_smol):
    """One batch; n-1 then 1 (a step); n-7 then 7 (a verify: every row); 5 then the rest. And,
    the mode turned off, the step's row differs: what makes them equal is the mode."""
    tokens = device_smol.tokenize_text(TEXT)[:64]
    n = len(tokens)
    whole = _read(device_smol, tokens, [n])
    assert np.array_equal(_read(device_smol, tokens, [n - 1, 1])[-1], whole[-1])
    assert np.array_equal(_read(device_smol, tokens, [n - 7, 7]), whole[-7:])
    assert np.array_equal(_read(device_smol, tokens, [5, n - 5])[-1], whole[-1])
    try:  # (a context asking exact_gpu would turn the mode back on)
        ex.set_gpu_mode(False)
        plain = replace(_params(), exact_gpu=False)
        released = [_read(device_smol, tokens, s, plain)[-1] for s in ([n], [n - 1, 1])]
    finally:
        ex.set_gpu_mode(True)
    assert not np.array_equal(*released)


def test_a_sequence_beside_another_reads_as_it_does_alone(device_smol):
    """Two sequences in one cache, their prompts read in one pass and then a step of each per
    pass, so their cells interleave: the first one's logits are those it has alone."""
    from engine.llama.context import LlamaSequence, Part, decode_batch

    mine = device_smol.tokenize_text(TEXT)[:48]
    theirs = device_smol.tokenize_text("A list of birds: wren, robin, finch, " * 6)[:40]
    with LlamaSequence(device_smol, _params()) as ctx:
        ctx.decode(mine)
        alone = [np.array(ctx.logits(), copy=True)]
        for _ in range(5):
            ctx.decode([int(alone[-1].argmax())])
            alone.append(np.array(ctx.logits(), copy=True))
    with LlamaSequence(device_smol, _params(n_parallel=2)) as ctx:
        a, b = ctx.sequences
        rows = decode_batch([Part(a, mine), Part(b, theirs)])
        together = [np.array(rows[0][-1], copy=True)]
        for _ in range(5):
            rows = decode_batch([Part(a, [int(together[-1].argmax())]),
                                 Part(b, [int(rows[1][-1].argmax())])])
            together.append(np.array(rows[0][-1], copy=True))
    for step, (x, y) in enumerate(zip(alone, together)):
        assert np.array_equal(x, y), step


def test_the_server_gives_the_same_reply_alone_and_beside_another(smol_path):
    """A request alone, then again at once with another on the same context of two sequences:
    the same reply, and a fingerprint naming an exact reply from a GPU build."""
    with two_sequences(smol_path, _params(n_parallel=2)) as (client, model_id):
        alone = ask(client, model_id, "Name a fruit.")
        beside, other = at_once(client, model_id, ["Name a fruit.", "Name an animal and a country."])
    for r in (alone, beside, other):
        assert r is not None and r.choices[0].message.content
        assert r.system_fingerprint == "duet-exact-patched-gpu"
    assert beside.choices[0].message.content == alone.choices[0].message.content
