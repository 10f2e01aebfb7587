"""Draft pairing judged from remote headers, against compat.check_pair on the real models."""

from __future__ import annotations

import pytest
from fakehub_repos import DRAFT_FILE, DRAFT_REPO, GEMMA_REPO, SMOL_REPO, TARGET_FILE, TARGET_REPO

from engine.models.hub.errors import HubError
from engine.models.hub.pair_catalog import FAMILIES, drafts_for
from engine.models.hub.pairing import ModelRef, check_facts, judge_ref, pair_drafts
from tests.conftest import model_path


def test_qwen_draft_accepted_smollm2_and_gemma_refused_with_reasons(hub):
    target, verdicts = pair_drafts(ModelRef(TARGET_REPO, TARGET_FILE),
                                   [ModelRef(SMOL_REPO), ModelRef(GEMMA_REPO)])
    assert target.facts.n_vocab == 151936
    by_repo = {v.candidate.repo: v for v in verdicts}
    assert by_repo[DRAFT_REPO].ok and by_repo[DRAFT_REPO].checked is True  # proposed by the catalog
    assert by_repo[DRAFT_REPO].candidate.file == DRAFT_FILE
    assert not by_repo[SMOL_REPO].ok and not by_repo[GEMMA_REPO].ok
    assert by_repo[SMOL_REPO].reason and by_repo[GEMMA_REPO].reason != "compatible"
    assert verdicts[0].candidate.repo == DRAFT_REPO  # compatible ones first
    refused = [v.size for v in verdicts if not v.ok]
    assert refused == sorted(refused)  # smallest first


def test_only_the_headers_are_read(hub):
    pair_drafts(ModelRef(TARGET_REPO, TARGET_FILE), use_catalog=True)
    for path_part in ("/cdn/" + TARGET_REPO, "/cdn/" + DRAFT_REPO):
        ranges = hub.ranges(path_part)
        assert ranges and all(r is not None for r in ranges)
        last = max(int(r.split("-")[1]) for r in ranges)
        assert last < 16 << 20  # the 1.1 GB target: a few MB of header only


@pytest.fixture(scope="module")
def target_vocab():
    from engine.llama.model import Model, ModelSpec

    path = model_path("target")
    with Model(ModelSpec(path, vocab_only=True)) as t:
        yield t, judge_ref(ModelRef(path=path))


@pytest.mark.parametrize("other", ["draft", "test", "gemma"])
def test_header_verdicts_agree_with_check_pair_on_the_real_models(target_vocab, other):
    from engine.decode.speculative.compat import check_pair
    from engine.llama.model import Model, ModelSpec

    t, t_judged = target_vocab
    d_path = model_path(other)
    with Model(ModelSpec(d_path, vocab_only=True)) as d:
        expected = check_pair(t, d)
    got = check_facts(t_judged, judge_ref(ModelRef(path=d_path)))
    assert got == expected  # the same verdict, in the same words


def test_an_unreadable_candidate_is_refused_not_fatal(hub):
    _, verdicts = pair_drafts(ModelRef(TARGET_REPO, TARGET_FILE), [ModelRef("nobody/nothing")], use_catalog=False)
    assert len(verdicts) == 1 and not verdicts[0].ok and "no such repository" in verdicts[0].reason


def test_refs_parse():
    assert ModelRef.parse("a/b") == ModelRef("a/b")
    assert ModelRef.parse("a/b/dir/x.gguf") == ModelRef("a/b", "dir/x.gguf")
    with pytest.raises(HubError):
        ModelRef.parse("justaname")


def test_catalog_covers_the_named_families():
    names = {f.name for f in FAMILIES}
    assert {"Qwen2.5", "Qwen2.5-Coder", "Qwen3", "Llama 3.x", "Gemma 3"} <= names
    assert [d.repo for _, d in drafts_for("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF".replace("Meta-", ""))] == [
        "bartowski/Llama-3.2-1B-Instruct-GGUF"]
    assert drafts_for("Qwen/Qwen3-8B-GGUF")[0][1].repo == "Qwen/Qwen3-0.6B-GGUF"
    assert drafts_for("google/gemma-3-12b-it-qat-q4_0-gguf")[0][0].name == "Gemma 3"
    assert drafts_for("someone/unknown-7B-GGUF") == []


def test_token_texts_are_compared_by_hash_within_the_size_slack(target_vocab):
    from dataclasses import replace

    from engine.models.hub.gguf_header import tokens_digest

    _, t = target_vocab

    def with_tokens(tokens):
        tokens = tuple(tokens)
        return replace(t, tokens=tokens, facts=replace(t.facts, n_vocab=len(tokens),
                                                        tokens_digest=tokens_digest(tokens)))

    assert check_facts(t, with_tokens(t.tokens)) is None
    changed = list(t.tokens)
    changed[1000] = b"something else"
    assert check_facts(t, with_tokens(changed)) == \
        f"token 1,000 is b'something else' in the draft but {t.tokens[1000]!r} in the target"
    assert check_facts(t, with_tokens(t.tokens + (b"<pad>",) * 100)) is None  # llama.cpp's 128 slack
    assert check_facts(t, with_tokens(t.tokens + (b"<pad>",) * 200)) == \
        f"the draft's vocabulary has {len(t.tokens) + 200:,} tokens, the target's {len(t.tokens):,}"
    changed_early = list(t.tokens)
    changed_early[2] = b"ignored"  # ids below 5 are not compared (as in llama.cpp)
    assert check_facts(t, with_tokens(changed_early)) is None
