"""Documents cut into passages: near the target size, at paragraph breaks, never across a
PDF's pages, with offsets into the text, the same every time."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from docfiles import code_sentence

from engine.documents.extract import Document, read_document
from engine.documents.passages import TARGET_CHARS, Passage, split


def doc_of(text: str, pages: tuple[int, ...] = (), name: str = "d.txt") -> Document:
    return Document(name, "pdf" if pages else "text", text, "0" * 64, len(text.encode()), pages)


def paragraph(i: int, words: int = 60) -> str:
    return " ".join(f"w{i}x{j}" for j in range(words)) + "."


def check_offsets(doc: Document, passages: list[Passage]) -> None:
    for n, p in enumerate(passages):
        assert p.index == n and p.doc_name == doc.name
        assert doc.text[p.start:p.start + len(p.text)] == p.text
        assert p.text == p.text.strip() and p.text


def test_paragraphs_are_grouped_and_never_cut() -> None:
    paragraphs = [paragraph(i) for i in range(40)]  # about 450 characters each
    doc = doc_of("\n\n".join(paragraphs))
    passages = split(doc)
    check_offsets(doc, passages)
    assert len(passages) > 5
    whole = set(paragraphs)
    for p in passages:
        assert all(part in whole for part in p.text.split("\n\n"))
        assert len(p.text) <= TARGET_CHARS * 1.25
    assert all(len(p.text) >= TARGET_CHARS // 2 for p in passages[:-1])
    assert [part for p in passages for part in p.text.split("\n\n")] == paragraphs


def test_a_short_document_is_one_passage() -> None:
    doc = doc_of("  \n\nJust one short note.\n\n")
    assert split(doc) == [Passage("d.txt", 0, None, "Just one short note.", 4)]


def test_nothing_to_split() -> None:
    assert split(doc_of("")) == [] and split(doc_of(" \n\n \t\n")) == []


def test_without_paragraphs_lines_then_sentences_then_spaces() -> None:
    lines = [f"line {i} of a long listing with some words on it" for i in range(200)]
    doc = doc_of("\n".join(lines))
    passages = split(doc)
    check_offsets(doc, passages)
    assert all(set(p.text.split("\n")) <= set(lines) for p in passages)

    sentences = " ".join(f"Sentence number {i} goes on for a few words." for i in range(200))
    for p in split(doc_of(sentences)):
        assert p.text.endswith(".") and p.text.startswith("Sentence number")

    words = " ".join(f"word{i}" for i in range(2000))
    for p in split(doc_of(words)):
        assert all(w.startswith("word") for w in p.text.split())
    assert " ".join(p.text for p in split(doc_of(words))) == words


def test_a_text_without_any_break_is_cut_at_the_target() -> None:
    text = "x" * 5000
    passages = split(doc_of(text), target_chars=1000)
    assert "".join(p.text for p in passages) == text
    assert all(len(p.text) <= 1250 for p in passages)


def test_passages_never_cross_pdf_pages() -> None:
    pages = ["\n\n".join(paragraph(10 * n + i) for i in range(n)) for n in range(1, 6)]
    text = "\n\n".join(pages)
    starts, offset = [], 0
    for page in pages:
        starts.append(offset)
        offset += len(page) + 2
    doc = doc_of(text, tuple(starts), name="book.pdf")
    passages = split(doc)
    check_offsets(doc, passages)
    for p in passages:
        assert p.page is not None
        assert p.text in pages[p.page - 1]
    assert sorted({p.page for p in passages}) == [1, 2, 3, 4, 5]


def test_an_empty_pdf_page_gives_no_passage() -> None:
    doc = doc_of("first\n\n\n\nthird", (0, 7, 9), name="gaps.pdf")
    assert [(p.page, p.text) for p in split(doc)] == [(1, "first"), (3, "third")]


def test_a_generated_pdf_keeps_its_page_numbers(make_pdf: Callable[..., Path]) -> None:
    doc = read_document(make_pdf([[code_sentence(n), paragraph(n, 150)] for n in range(1, 4)]))
    passages = split(doc)
    check_offsets(doc, passages)
    for n in range(1, 4):
        first = next(p for p in passages if p.page == n)
        assert first.text.startswith(code_sentence(n))


def test_splitting_is_deterministic_and_passages_are_frozen() -> None:
    doc = doc_of("\n\n".join(paragraph(i, 40 + i % 7) for i in range(60)))
    assert split(doc) == split(doc)
    with pytest.raises(dataclasses.FrozenInstanceError):
        split(doc)[0].text = "changed"  # type: ignore[misc]
    with pytest.raises(ValueError):
        split(doc, target_chars=0)
