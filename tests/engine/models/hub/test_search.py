"""Search and file listings through huggingface_hub's HfApi against the fake Hub."""

from __future__ import annotations

import pytest
from fakehub_repos import GATED_REPO, SMOL_REPO, TARGET_REPO

from engine.models.hub.errors import HubError
from engine.models.hub.files import RemoteFile, group_gguf, quant_of
from engine.models.hub.search import repo_files, search


def test_search_finds_gguf_repos_most_downloaded_first(hub):
    hits = search("qwen")
    assert [h.repo for h in hits] == [TARGET_REPO, "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"]
    assert hits[0].downloads == 900
    everything = search("")
    assert [h.downloads for h in everything] == sorted((h.downloads for h in everything), reverse=True)
    assert any(h.gated == "manual" for h in everything)
    assert ("GET", "/api/models") in {(m, p) for m, p, _ in hub.requests}


def test_files_have_sizes_sha_licence_and_gating(hub):
    files = repo_files(SMOL_REPO)
    assert [e.quant for e in files.entries] == ["Q4_1"]  # README.md is not listed
    entry = files.entries[0]
    assert entry.size == 98362432 and len(entry.first.sha256) == 64
    assert files.licence == "apache-2.0" and files.gated is False
    assert repo_files(GATED_REPO).gated == "manual"


def test_split_files_are_one_entry_and_incomplete_sets_are_dropped(split_repo):
    files = repo_files("test/split-GGUF")
    assert len(files.entries) == 1
    entry = files.entries[0]
    assert entry.is_split and entry.quant == "Q4_1"
    assert [f.path for f in entry.files] == [f"Q4_1/split-Q4_1-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert entry.size == sum(f.size for f in split_repo.files[:3])
    assert files.entry("split-Q4_1-00002-of-00003.gguf") == entry == files.entry(entry.files[2].path)


def test_grouping_orders_by_size_and_reads_quant_labels():
    files = [RemoteFile(n, s, None) for n, s in [("m-Q8_0.gguf", 8), ("m-Q4_K_M.gguf", 4), ("m-F16.gguf", 16),
                                                  ("readme.md", 1), ("m-IQ4_XS-00002-of-00002.gguf", 2),
                                                  ("m-IQ4_XS-00001-of-00002.gguf", 2)]]
    assert [(e.quant, e.size) for e in group_gguf(files)] == [
        ("IQ4_XS", 4), ("Q4_K_M", 4), ("Q8_0", 8), ("F16", 16)]
    assert quant_of("gemma-3-4b-it-qat-q4_0.gguf") == "Q4_0"
    assert quant_of("model-UD-Q4_K_XL.gguf") == "Q4_K_XL"
    assert quant_of("tiny.gguf") == "?"


def test_missing_repo_and_no_network_are_one_line(hub):
    with pytest.raises(HubError, match="no such repository"):
        repo_files("nobody/nothing")
    hub.stop()
    with pytest.raises(HubError, match="cannot reach Hugging Face") as e:
        search("qwen")
    assert "\n" not in str(e.value)


def test_offline_mode_says_so(hub, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError, match="offline"):
        search("qwen")
