"""Fixtures of the document tests: generated PDFs (the helpers are in docfiles)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from docfiles import FILLER, code_sentence, write_pdf


@pytest.fixture
def make_pdf(tmp_path: Path) -> Callable[..., Path]:
    def make(pages: Sequence[Sequence[str]], name: str = "doc.pdf", **kw: str) -> Path:
        return write_pdf(tmp_path / name, pages, **kw)

    return make


@pytest.fixture(scope="session")
def code_word_pdf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 pages, each stating its own code word among filler prose."""
    pages = [[code_sentence(n), FILLER[n % 3], FILLER[(n + 1) % 3]] for n in range(1, 301)]
    return write_pdf(tmp_path_factory.mktemp("pdf") / "codes.pdf", pages)
