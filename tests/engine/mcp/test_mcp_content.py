"""Tool results as bounded plain text."""

from __future__ import annotations

import base64

import mcp_types as types

from engine.mcp.content import bounded, tool_result


def result(
    *content: types.ContentBlock, structured: object = None, error: bool = False
) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), structured_content=structured, is_error=error)


def test_blocks_become_text_and_binary_a_short_note() -> None:
    png = base64.b64encode(b"\0" * 12_000).decode()
    r = tool_result(
        result(
            types.TextContent(text="first"),
            types.ImageContent(data=png, mime_type="image/png"),
            types.AudioContent(data=base64.b64encode(b"\0" * 500).decode(), mime_type="audio/wav"),
            types.EmbeddedResource(resource=types.TextResourceContents(uri="file:///a.txt", text="inside")),
            types.EmbeddedResource(
                resource=types.BlobResourceContents(
                    uri="file:///b.bin", blob=png, mime_type="application/zip"
                )
            ),
            types.ResourceLink(uri="file:///c.md", name="notes"),
        ),
        limit=10_000,
    )
    assert r.text == (
        "first\n[image/png, 12 kB]\n[audio/wav, 500 B]\ninside\n"
        "[application/zip, 12 kB, file:///b.bin]\n[link: notes file:///c.md]"
    )
    assert (r.is_error, r.truncated) == (False, False)


def test_structured_content_alone_is_given_as_json() -> None:
    assert (
        tool_result(result(structured={"temp": 21.5, "city": "Zürich"}), 100).text
        == '{"temp": 21.5, "city": "Zürich"}'
    )


def test_empty_and_error_results() -> None:
    assert tool_result(result(), 100).text == "(no content)"
    failed = tool_result(result(types.TextContent(text="boom"), error=True), 100)
    assert (failed.text, failed.is_error) == ("boom", True)


def test_a_long_result_is_cut_and_says_so() -> None:
    r = tool_result(result(types.TextContent(text="a" * 70), types.TextContent(text="b" * 70)), limit=100)
    assert r.truncated
    assert (
        r.text
        == "a" * 70 + "\n" + "b" * 29 + "\n[… cut: the result had 141 characters; the first 100 are shown]"
    )


def test_bounded_keeps_no_more_than_the_limit() -> None:
    assert bounded(iter(["abc", "def"]), 6) == ("abcdef", False)
    assert bounded(iter(["abc", "def"]), 4)[0].startswith("abcd\n[… cut")
    assert (
        bounded(iter(["x" * 10**6] * 5), 10)[0]
        == "x" * 10
        + "\n[… cut: the result had 5,000,000 characters; "
        "the first 10 are shown]"
    )
