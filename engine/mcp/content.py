"""A tool's result as bounded plain text: what the chat shows and the model reads.

Text blocks are kept as they are (they are untrusted text: nothing here interprets them);
images, audio and binary resources become a short note such as ``[image/png, 12 kB]``; a
result with no content blocks but structured content is given as its JSON. At most ``limit``
characters are kept; a longer result is cut and ends with a line saying so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import mcp_types as types

from engine.tools.calls import ToolResult


def _size(base64_data: str) -> str:
    """The decoded size of base64 data, read from its length (nothing is decoded)."""
    n = len(base64_data) * 3 // 4 - base64_data[-2:].count("=")
    return f"{n} B" if n < 1000 else f"{n / 1000:.0f} kB" if n < 1_000_000 else f"{n / 1e6:.1f} MB"


def block_text(block: Any) -> str:
    """One content block as text (binary content as a short note)."""
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.mime_type}, {_size(block.data)}]"
    if isinstance(block, types.ResourceLink):
        return f"[link: {block.name} {block.uri}]"
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            return res.text
        return f"[{res.mime_type or 'binary'}, {_size(res.blob)}, {res.uri}]"
    return f"[{getattr(block, 'type', 'unknown')} content]"


def _pieces(result: types.CallToolResult) -> Iterator[str]:
    if not result.content and result.structured_content is not None:
        yield json.dumps(result.structured_content, ensure_ascii=False)
        return
    for i, block in enumerate(result.content):
        if i:
            yield "\n"
        yield block_text(block)


def bounded(pieces: Iterator[str], limit: int) -> tuple[str, bool]:
    """The first ``limit`` characters of the joined pieces, and whether more were dropped
    (then a closing line gives the full length). Keeps no more than ``limit`` characters."""
    kept: list[str] = []
    room, total = limit, 0
    for piece in pieces:
        total += len(piece)
        if room > 0:
            kept.append(piece[:room])
            room -= len(kept[-1])
    text = "".join(kept)
    if total <= limit:
        return text, False
    return f"{text}\n[… cut: the result had {total:,} characters; the first {limit:,} are shown]", True


def tool_result(result: types.CallToolResult, limit: int) -> ToolResult:
    text, cut = bounded(_pieces(result), limit)
    if not text and not cut:
        text = "(no content)"
    return ToolResult(text, is_error=bool(result.is_error), truncated=cut)
