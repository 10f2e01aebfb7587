"""Finding the passages of attached documents that a message asks about: BM25 over an SQLite
FTS5 index (as engine.conversation.search_index, the standard library's sqlite3 and nothing
else), optionally re-ranked with embeddings.

The tokenizer is ``porter unicode61 remove_diacritics 2``: words, not the trigrams of the
conversation search, because here the order is by relevance (BM25 weighs whole words by how
rare they are), with English stemming so that "codes" finds "code" and accents folded so that
"cafe" finds "café". The passages are stored in the index itself (unindexed columns), so an
index at a path can be opened again.

A query is the user's own words, not FTS5 syntax: it is cut into words (``\\w+``), each quoted
and the quoted words OR-ed, so quotes, ``*``, ``NEAR``, parentheses or a lone ``-`` are words or
nothing and never a syntax error; a query with no word finds nothing. Words that are in almost
every passage ("the", "what") weigh almost nothing in BM25, so no stop list is needed.

``embed``: a function from texts to one vector each. BM25's best ``CANDIDATES`` (at least
4 k) are ranked again by cosine similarity to the query, and the two rankings fused by
reciprocal rank, ``1/(60 + rank)`` summed (60: the constant of Cormack et al., 2009, the usual
choice). Only BM25's candidates are embedded: a message's search stays a few dozen embeddings,
not one for every passage of a 300-page file. A text longer than the embedding model's context
(512 tokens of all-MiniLM: a passage of code or a table, at two or three characters a token, can
be 600) is embedded by its beginning, cut to fit, as sentence-transformers truncates: refusing it
threw the whole ranking back to BM25: 103 of the 1,242 passages of two real manuals are over
512, and 40 of 46 questions about them had one among their candidates
(docs/benchmarks/documents.md, "Passages worth their tokens").
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

import numpy as np

from engine.documents.embeddings import InputTooLongError
from engine.documents.passages import Passage
from engine.errors import DuetError

log = logging.getLogger(__name__)

RRF_K = 60
CANDIDATES = 50
MAX_TERMS = 64  # a pasted page as the query still makes a bounded query
_WORD = re.compile(r"\w+")
_SCHEMA = ("CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(body, doc_name UNINDEXED, "
           "idx UNINDEXED, page UNINDEXED, start UNINDEXED, "
           "tokenize='porter unicode61 remove_diacritics 2')")

Embed = Callable[[list[str]], np.ndarray]


def fts_query(query: str) -> str:
    """``query``'s words as an FTS5 query of quoted words OR-ed ("" if it has none)."""
    words = list(dict.fromkeys(w.casefold() for w in _WORD.findall(query)))[:MAX_TERMS]
    return " OR ".join(f'"{w}"' for w in words)


class PassageIndex:
    """Passages searchable by BM25; in memory unless ``db`` names a file. Not thread-safe."""

    def __init__(self, db: Path | str | None = None) -> None:
        self._conn = sqlite3.connect(":memory:" if db is None else str(db))
        with self._conn:
            self._conn.execute(_SCHEMA)

    def add(self, passages: Iterable[Passage]) -> None:
        with self._conn:
            self._conn.executemany(
                "INSERT INTO passages(body, doc_name, idx, page, start) VALUES (?, ?, ?, ?, ?)",
                ((p.text, p.doc_name, p.index, p.page, p.start) for p in passages))

    def search(self, query: str, k: int, embed: Embed | None = None) -> list[tuple[Passage, float]]:
        """The ``k`` passages that best match ``query``, best first, each with its score: the
        negated bm25() (higher is better), or the fused reciprocal-rank score with ``embed``."""
        match = fts_query(query)
        if not match or k <= 0:
            return []
        limit = k if embed is None else max(CANDIDATES, 4 * k)
        rows = self._conn.execute(
            "SELECT body, doc_name, idx, page, start, bm25(passages) AS score FROM passages "
            "WHERE passages MATCH ? ORDER BY score, rowid LIMIT ?", (match, limit)).fetchall()
        found = [(Passage(name, idx, page, body, start), -score)
                 for body, name, idx, page, start, score in rows]
        if embed is None or not found:
            return found
        try:
            return rerank(query, [p for p, _ in found], embed)[:k]
        except (DuetError, ValueError) as e:  # a passage too long for it, a closed embedder...
            log.warning("the passages are ranked by BM25 alone: %s", e)
            return found[:k]

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM passages").fetchone()[0])

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> PassageIndex:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def rerank(query: str, ranked: list[Passage], embed: Embed) -> list[tuple[Passage, float]]:
    """``ranked`` (best first) fused by reciprocal rank with their cosine order to ``query``."""
    vectors = np.asarray(embed_fitting(embed, [query] + [p.text for p in ranked]), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(ranked) + 1:
        raise ValueError(f"embed gave {vectors.shape} for {len(ranked) + 1} texts")
    norms = np.linalg.norm(vectors, axis=1)
    unit = vectors / np.maximum(norms, 1e-12)[:, None]
    cosine = unit[1:] @ unit[0]
    by_cosine = sorted(range(len(ranked)), key=lambda i: (-cosine[i], i))
    fused = [1.0 / (RRF_K + i + 1) for i in range(len(ranked))]
    for rank, i in enumerate(by_cosine):
        fused[i] += 1.0 / (RRF_K + rank + 1)
    order = sorted(range(len(ranked)), key=lambda i: (-fused[i], i))
    return [(ranked[i], fused[i]) for i in order]


def embed_fitting(embed: Embed, texts: list[str]) -> np.ndarray:
    """``embed(texts)``, a text too long for the embedder cut at its end until it fits: to the
    share of its characters that the limit is of its tokens, less a tenth, then again if need be
    (InputTooLongError is raised before anything is computed, so a retry costs a tokenization)."""
    texts = list(texts)
    for _ in range(4 * len(texts) + 1):
        try:
            return embed(texts)
        except InputTooLongError as e:
            text = texts[e.index]
            keep = len(text) * e.limit * 9 // (10 * e.n_tokens)
            if not 0 < keep < len(text):
                raise
            texts[e.index] = text[:keep]
    return embed(texts)
