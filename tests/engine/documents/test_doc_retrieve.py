"""Retrieval by BM25 over FTS5: the right page of a 300-page PDF, queries that are never FTS5
syntax errors, an index kept at a path, and embeddings fused by reciprocal rank."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.documents.extract import read_document
from engine.documents.passages import Passage, split
from engine.documents.retrieve import RRF_K, PassageIndex, fts_query


@pytest.fixture(scope="module")
def code_index(code_word_pdf: Path) -> PassageIndex:
    index = PassageIndex()
    index.add(split(read_document(code_word_pdf)))
    return index


def test_the_question_finds_its_page_first(code_index: PassageIndex) -> None:
    found = code_index.search("What is the code word on page 137?", 5)
    best = found[0][0]
    assert best.page == 137 and "ZEBRA-137" in best.text
    assert best.doc_name == "codes.pdf"
    scores = [s for _, s in found]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[1]


@pytest.mark.parametrize("page", [1, 42, 300])
def test_other_pages_are_found_too(code_index: PassageIndex, page: int) -> None:
    assert code_index.search(f"code word page {page}", 1)[0][0].page == page


def test_k_bounds_the_answer(code_index: PassageIndex) -> None:
    assert len(code_index.search("orchard pruning", 7)) == 7
    assert code_index.search("orchard", 0) == []


@pytest.mark.parametrize("query", ["", "   ", "?!.", '"', "*", "()", "-", "^", ":", "___", "''\"\""])
def test_a_query_without_words_finds_nothing(code_index: PassageIndex, query: str) -> None:
    assert code_index.search(query, 5) == []


@pytest.mark.parametrize("query", ['code" OR "x', "NEAR(code word)", "code AND", "page:137", "-code",
                                   "code*", "^code", "{page} 137", "OR OR NOT"])
def test_fts5_syntax_in_a_query_is_only_words(code_index: PassageIndex, query: str) -> None:
    code_index.search(query, 3)  # no sqlite3.OperationalError


def test_the_query_is_quoted_words_ored() -> None:
    assert fts_query('What is "the" code-word?') == '"what" OR "is" OR "the" OR "code" OR "word"'
    assert fts_query("?!") == ""


def test_stemming_and_accents() -> None:
    index = PassageIndex()
    index.add([Passage("a.txt", 0, None, "The café codes were written down.", 0),
               Passage("a.txt", 1, None, "Nothing here at all.", 34)])
    assert [p.index for p, _ in index.search("cafe", 5)] == [0]
    assert [p.index for p, _ in index.search("code", 5)] == [0]


def test_an_index_at_a_path_opens_again(tmp_path: Path) -> None:
    db = tmp_path / "passages.sqlite3"
    passage = Passage("r.pdf", 3, 2, "Lighthouse keepers count ships at night.", 120)
    with PassageIndex(db) as index:
        index.add([passage])
    with PassageIndex(db) as again:
        assert len(again) == 1
        assert again.search("ships", 1) == [(passage, pytest.approx(again.search("ships", 1)[0][1]))]


def _apple_index() -> tuple[PassageIndex, list[Passage]]:
    passages = [Passage("f.txt", 0, None, "apple apple apple pie", 0),
                Passage("f.txt", 1, None, "apple orchard in the valley", 30),
                Passage("f.txt", 2, None, "an apple fell from a tree near the old mill wall", 60)]
    index = PassageIndex()
    index.add(passages)
    return index, passages


def test_embeddings_are_fused_by_reciprocal_rank() -> None:
    index, passages = _apple_index()
    plain = [p.index for p, _ in index.search("apple", 3)]
    assert plain == [0, 1, 2]
    vectors = {"apple": [1.0, 0.0], passages[0].text: [0.0, 1.0], passages[1].text: [1.0, 0.1],
               passages[2].text: [0.5, 0.5]}
    seen: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        seen.append(texts)
        return np.array([vectors[t] for t in texts])

    fused = index.search("apple", 3, embed=embed)
    assert [p.index for p, _ in fused] == [1, 0, 2]  # BM25 2nd and cosine 1st beats 1st and 3rd
    assert fused[0][1] == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1))
    assert seen[0][0] == "apple" and len(seen) == 1
    assert index.search("apple", 1, embed=embed)[0][0].index == 1


def test_an_embedder_that_fails_leaves_bm25s_order(caplog) -> None:
    """A wrong shape, or an embedder's own refusal (a passage too long for it, a closed model):
    the question is still answered from what BM25 found, and the log says why."""
    from engine.errors import DuetError

    index, _ = _apple_index()
    plain = [p.index for p, _ in index.search("apple", 2)]

    def refuses(texts):
        raise DuetError("input 3 is too long to embed")

    for embed in (lambda texts: np.zeros((1, 4)), refuses):
        assert [p.index for p, _ in index.search("apple", 2, embed=embed)] == plain
    assert sum("ranked by BM25 alone" in r.message for r in caplog.records) == 2


def test_zero_vectors_do_not_divide_by_zero() -> None:
    index, _ = _apple_index()
    found = index.search("apple", 3, embed=lambda texts: np.zeros((len(texts), 4)))
    assert [p.index for p, _ in found] == [0, 1, 2]


def test_a_text_too_long_to_embed_is_embedded_by_its_beginning() -> None:
    """A passage past the embedder's context (code or a table: 600 tokens of all-MiniLM's 512)
    is cut at its end until it fits, and the fused order still stands, instead of the whole
    ranking falling back to BM25 (it did on two real manuals at about half the questions)."""
    from engine.documents.embeddings import InputTooLongError
    from engine.documents.retrieve import embed_fitting

    asked: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:  # one token a character, 100 at most
        asked.append(list(texts))
        for i, t in enumerate(texts):
            if len(t) > 100:
                raise InputTooLongError(i, len(t), 100)
        return np.array([[len(t), 1.0] for t in texts])

    vectors = embed_fitting(embed, ["short", "x" * 250, "y" * 120])
    assert [row[0] for row in vectors] == [5, 90, 90]  # cut to 9/10 of the share that fits
    assert len(asked) == 3 and asked[0] == ["short", "x" * 250, "y" * 120]

    index, _ = _apple_index()  # the third passage (48 characters) is too long below
    by_start = {"apple": [1.0, 0.0], "apple appl": [0.0, 1.0], "apple orch": [1.0, 0.1],
                "an apple f": [0.5, 0.5]}

    def short_embed(texts: list[str]) -> np.ndarray:
        for i, t in enumerate(texts):
            if len(t) > 30:
                raise InputTooLongError(i, len(t), 30)
        return np.array([by_start[t[:10]] for t in texts])

    fused = index.search("apple", 3, embed=short_embed)
    assert [p.index for p, _ in fused] == [1, 0, 2]  # fused, not BM25's [0, 1, 2]


def test_an_embedder_that_refuses_a_text_outright_still_falls_back() -> None:
    from engine.documents.embeddings import InputTooLongError
    from engine.documents.retrieve import embed_fitting

    def refuses(texts: list[str]) -> np.ndarray:
        raise InputTooLongError(0, 10, 0)  # nothing fits: no cut helps

    with pytest.raises(InputTooLongError):
        embed_fitting(refuses, ["a text"])
