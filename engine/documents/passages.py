"""A document cut into passages to retrieve: paragraphs grouped up to about ``TARGET_CHARS``.

Size: 1,200 characters is about 300 tokens of English (four characters a token). That holds a
paragraph or two with enough of their context to answer from, yet four or five passages fit
the 1,536 tokens of a 4,096-token context that retrieved text may take (engine.prompts.attachments),
and BM25 ranks passages of similar, moderate length more evenly than whole pages (a long
passage matches every query a little) or single lines (too few words to match on).

Where: a passage ends at the paragraph break (a blank line) nearest its target, else at a line
end (a PDF's lines, a .docx's paragraphs), else after a sentence, else at a space, and only as a
last resort inside a word; it never spans two pages of a PDF, so each passage has one page to
cite. A passage is between half the target and 1.25 times it, except the last of a page or
document, which may be shorter.

No overlap: passages end at paragraph breaks, so none starts in the middle of a thought, and
the prompt puts the retrieved passages back in document order, so two neighbours that are both
chosen read on as the document does. Overlap would put the same sentences into the prompt twice
and count their words twice for BM25.

Deterministic: the same document always gives the same passages (the prompt's prefix, and the
KV cache of it, depend on that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.documents.extract import Document

TARGET_CHARS = 1200
_BREAKS = (re.compile(r"\n[ \t]*\n\s*"), re.compile(r"\n\s*"), re.compile(r"[.!?…][\"')\]]*\s+"),
           re.compile(r"\s+"))


@dataclass(frozen=True)
class Passage:
    """Part of a document: ``index`` among its passages (0-based), its PDF ``page`` (1-based,
    None for other kinds), its ``text`` and where that text starts in the document's text."""

    doc_name: str
    index: int
    page: int | None
    text: str
    start: int


def split(doc: Document, target_chars: int = TARGET_CHARS) -> list[Passage]:
    """``doc``'s text as passages, in order (none of only white space)."""
    if target_chars < 1:
        raise ValueError("target_chars must be positive")
    text = doc.text
    spans: list[tuple[int, int, int | None]]
    if doc.pages:
        ends = [*doc.pages[1:], len(text)]
        spans = [(start, end, n) for n, (start, end) in enumerate(zip(doc.pages, ends), 1)]
    else:
        spans = [(0, len(text), None)]
    out: list[Passage] = []
    for lo, hi, page in spans:
        for start, end in _cuts(text, lo, min(hi, len(text)), target_chars):
            chunk = text[start:end]
            body = chunk.strip()
            if body:
                lead = len(chunk) - len(chunk.lstrip())
                out.append(Passage(doc.name, len(out), page, body, start + lead))
    return out


def _cuts(text: str, lo: int, hi: int, target: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into spans of about ``target`` characters at the best breaks."""
    spans = []
    pos = lo
    longest = target + target // 4
    while hi - pos > longest:
        end = _break(text, pos + max(1, target // 2), pos + longest, pos + target)
        spans.append((pos, end))
        pos = end
    if pos < hi:
        spans.append((pos, hi))
    return spans


def _break(text: str, lo: int, hi: int, aim: int) -> int:
    """Where to end a passage within ``[lo, hi]``: after the strongest kind of break found
    there, the one nearest ``aim``; ``aim`` itself if there is none."""
    for pattern in _BREAKS:
        ends = [m.end() for m in pattern.finditer(text, lo, hi) if lo < m.end() <= hi]
        if ends:
            return min(ends, key=lambda e: (abs(e - aim), e))
    return aim
