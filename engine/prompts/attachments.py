"""Files attached to messages, into the prompt: whole, or only the passages relevant to the
message they came with.

A document that fits the context with room left for the reply and the conversation goes in
whole, before the text of the message that carries it, so that every conversation that starts
with the same file shares that prefix with the cache (and the disk KV store restores it instead
of reading it again, engine.cache.kv_store). A larger one (a 300-page PDF, many files) is split into
passages (engine.documents.passages); the message's text retrieves the best of them by BM25 over
SQLite FTS5 (engine.documents.retrieve), with embeddings when an embedder is given, and only
those go in, each with its file and page. Retrieval is a function of the message's own text, so
the same message gives the same passages at every turn (the conversation's prefix stays cached).

A document's text is a message's text: nothing in it becomes markup (engine.chat.fit).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from engine.chat.messages import Attachment, Message
from engine.documents.extract import Document
from engine.documents.passages import TARGET_CHARS, Passage, split
from engine.documents.retrieve import PassageIndex

log = logging.getLogger(__name__)

# Of the context, what attached files may take in all: the rest is the conversation, the
# question and the reply. Half lets a 4,096-token context take a 2,000-token file whole.
WHOLE_SHARE = 0.5
# Retrieved passages take at most RETRIEVED_TOKENS, and at most RETRIEVED_SHARE of the context
# (the rest is the conversation, the question and the reply). Measured on two real manuals, 46
# questions each answered on one page (python -m bench retrieval, docs/benchmarks/documents.md,
# "Passages worth their tokens"): the answer's page is among the passages for 83% of questions
# at 500 tokens, 91% at 1,000, 98% at 1,500 and no more at 2,000 (BM25 fused with embeddings;
# BM25 alone 96% from 1,500). So 1,536 tokens (four or five passages of ~300) where the context
# allows: three eighths of a 4,096 context (1,000 tokens, about the quarter it had before, missed
# 4 questions where 1,500 missed 1), and no more in larger contexts (a quarter of 8,192 gave
# 2,048), where more passages find no more and only cost reading time.
RETRIEVED_TOKENS = 1536
RETRIEVED_SHARE = 0.375
TOP_K = 8  # passages asked of the index before they are cut to the budget
MIN_CHARS = 150  # the smallest passages tried for a small context (about two sentences)

Embed = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class Source:
    """A part of a file the model saw: the whole file, or one passage (its page, if any)."""

    name: str
    mode: str  # whole or retrieved
    page: int | None = None


def attachment(doc: Document, mode: str = "auto") -> Attachment:
    """What a message keeps of a document read once."""
    return Attachment(doc.name, doc.kind, doc.sha256, doc.text, doc.pages, mode)


def block(name: str, text: str, page: int | None = None) -> str:
    where = f' page="{page}"' if page is not None else ""
    return f'<document name="{_attr(name)}"{where}>\n{text}\n</document>\n\n'


def _attr(name: str) -> str:
    return name.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def modes(messages: Sequence[Message], n_ctx: int, count: Callable[[str], int]) -> list[str]:
    """For each attachment of ``messages`` in order: whole or retrieved. ``auto`` files go in
    whole while they fit WHOLE_SHARE of the context together (the earliest first)."""
    budget = int(n_ctx * WHOLE_SHARE)
    out = []
    for m in messages:
        for a in m.attachments:
            n = count(block(a.name, a.text)) if a.mode != "retrieved" else 0
            if a.mode == "whole" or (a.mode == "auto" and n <= budget):
                out.append("whole")
                budget -= n
            else:
                out.append("retrieved")
    return out


def expand(messages: Sequence[Message], n_ctx: int, count: Callable[[str], int],
           embed: Embed | None = None) -> tuple[list[Message], list[Source]]:
    """``messages`` with each attachment put into its message's text (whole, or the passages
    its text retrieves), and what the model sees of the files of the last message that has
    any (the reply's sources)."""
    chosen = iter(modes(messages, n_ctx, count))
    out: list[Message] = []
    sources: list[Source] = []
    for m in messages:
        if not m.attachments:
            out.append(m)
            continue
        parts, seen = [], []
        retrieved = []
        for a in m.attachments:
            if next(chosen) == "whole":
                parts.append(block(a.name, a.text))
                seen.append(Source(a.name, "whole"))
            else:
                retrieved.append(a)
        if retrieved:
            for p in retrieve(retrieved, m.content, retrieved_budget(n_ctx), count, embed):
                parts.append(block(p.doc_name, p.text, p.page))
                seen.append(Source(p.doc_name, "retrieved", p.page))
        out.append(replace(m, content="".join(parts) + m.content, attachments=()))
        sources = seen
    return out, sources


def retrieved_budget(n_ctx: int) -> int:
    """The tokens retrieved passages may take in a context of ``n_ctx``."""
    return min(RETRIEVED_TOKENS, int(n_ctx * RETRIEVED_SHARE))


def retrieve(files: Sequence[Attachment], query: str, budget: int, count: Callable[[str], int],
             embed: Embed | None = None) -> list[Passage]:
    """The passages of ``files`` that ``query`` finds, best first, within ``budget`` tokens
    (then put back in the files' order, so that the prompt reads as the documents do). A
    context too small for one passage gets smaller ones (halved down to MIN_CHARS), then the
    best one cut at its end."""
    target = TARGET_CHARS
    while True:
        kept, found = _retrieve(files, query, budget, count, embed, target)
        if kept or not found or budget <= 0:
            return kept
        if target // 2 < MIN_CHARS:
            return [_cut(found[0], budget, count)]
        target //= 2


def _retrieve(files: Sequence[Attachment], query: str, budget: int, count: Callable[[str], int],
              embed: Embed | None, target_chars: int) -> tuple[list[Passage], list[Passage]]:
    """(the passages kept within ``budget``, in the files' order; every passage found, best first)."""
    passages: list[Passage] = []
    for a in files:
        doc = Document(a.name, a.kind, a.text, a.sha256, len(a.text.encode()), a.pages)
        passages += split(doc, target_chars)
    with PassageIndex() as index:
        index.add(passages)
        found = index.search(query, TOP_K, embed=embed) if query.strip() else []
    if not found:  # a message with nothing to search by: the files' beginnings
        found = [(p, 0.0) for p in passages[:TOP_K]]
    kept: list[Passage] = []
    for p, _ in found:
        n = count(block(p.doc_name, p.text, p.page))
        if n > budget:
            continue
        kept.append(p)
        budget -= n
    order = {(p.doc_name, p.index): i for i, p in enumerate(passages)}
    return sorted(kept, key=lambda p: order[(p.doc_name, p.index)]), [p for p, _ in found]


def _cut(p: Passage, budget: int, count: Callable[[str], int]) -> Passage:
    """``p`` cut at its end until it fits ``budget`` tokens (a quarter less each time)."""
    text = p.text
    while text and count(block(p.doc_name, text, p.page)) > budget:
        text = text[:len(text) * 3 // 4]
    return dataclasses.replace(p, text=text)
