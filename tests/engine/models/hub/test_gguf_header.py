"""The pure GGUF header parser, on the real starter models' bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.models.hub.gguf_header import GGUFError, NeedMoreBytes, model_facts, parse_header
from engine.models.hub.remote_header import local_header
from tests.conftest import model_path


@pytest.fixture(scope="module")
def smol_head() -> bytes:
    with open(model_path("test"), "rb") as f:
        return f.read(8 << 20)


def test_facts_match_what_llama_cpp_reports(smol, smol_head):
    h = parse_header(smol_head)
    f = model_facts(h)
    assert (f.architecture, f.n_layer, f.n_head, f.n_head_kv, f.n_embd, f.n_ctx_train, f.n_vocab) == (
        smol.architecture, smol.n_layer, smol.n_head, smol.n_head_kv, smol.n_embd, smol.n_ctx_train, smol.n_vocab)
    assert (f.head_dim_k, f.head_dim_v) == (smol.head_dim_k, smol.head_dim_v)
    assert (f.bos, f.eos, f.add_bos) == (smol.bos, smol.eos, smol.add_bos)
    assert f.has_chat_template == (smol.chat_template is not None)
    # The tensor table accounts for every byte of data after the header.
    assert f.tensor_bytes <= smol.size_bytes - h.data_offset < f.tensor_bytes + 64 * f.n_tensors


def test_a_short_prefix_asks_for_more_and_more_is_enough(smol_head):
    full = parse_header(smol_head)
    for cut in (0, 3, 20, 1000, full.header_size // 2, full.header_size - 1):
        with pytest.raises(NeedMoreBytes) as e:
            parse_header(smol_head[:cut])
        assert cut < e.value.at_least <= full.header_size + 8
    assert parse_header(smol_head[:full.header_size]).metadata == full.metadata


@pytest.mark.parametrize("where", ["tensor count", "kv count", "key length"])
def test_absurd_lengths_are_refused_before_allocating(smol_head, where):
    buf = bytearray(smol_head[:1 << 16])
    offset = {"tensor count": 8, "kv count": 16, "key length": 24}[where]
    buf[offset:offset + 8] = struct.pack("<Q", 1 << 62)
    with pytest.raises(GGUFError) as e:
        parse_header(bytes(buf))
    assert not isinstance(e.value, NeedMoreBytes)


def test_not_gguf():
    with pytest.raises(GGUFError, match="not a GGUF"):
        parse_header(b"PK\x03\x04" + bytes(100))


def test_local_header_reads_a_qwen_vocabulary_larger_than_the_first_read():
    h = local_header(model_path("target"), first=1 << 20)  # the Qwen header is ~6 MB
    assert model_facts(h).n_vocab == 151936


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, (1 << 16) - 1), st.integers(0, 255)), min_size=1, max_size=8),
       cut=st.integers(0, 1 << 16))
def test_corrupt_bytes_raise_only_gguf_errors(smol_head, flips, cut):
    buf = bytearray(smol_head[:1 << 16])
    for pos, value in flips:
        buf[pos] = value
    try:
        parse_header(bytes(buf[:cut]))
    except GGUFError:
        pass
