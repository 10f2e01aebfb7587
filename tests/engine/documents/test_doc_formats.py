"""PDF, .docx and HTML into text, and their refusals: encrypted, truncated and malformed PDFs,
zip bombs and entity bombs in .docx files."""

from __future__ import annotations

import os
import re
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from docfiles import FILLER, docx_xml, write_docx, write_raw_zip, zeros_deflated

from engine.documents import formats
from engine.documents.extract import DocumentError, read_document


def refused(path: Path, *words: str) -> str:
    with pytest.raises(DocumentError) as info:
        read_document(path)
    message = str(info.value)
    assert "\n" not in message and path.name in message, message
    for word in words:
        assert word in message, message
    return message


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# -- PDF -----------------------------------------------------------------------------------

def test_a_pdf_gives_its_words_in_order_and_where_each_page_starts(make_pdf: Callable[..., Path]) -> None:
    pages = [["Page one says hello.", FILLER[0]], ["Page two says goodbye.", FILLER[1]],
             ["Caf\u00e9 na\u00efve \u00fcber."]]
    doc = read_document(make_pdf(pages))
    assert doc.kind == "pdf" and len(doc.pages) == 3 and doc.pages[0] == 0
    for i, paragraphs in enumerate(pages):
        end = doc.pages[i + 1] if i + 1 < len(doc.pages) else len(doc.text)
        assert flat(doc.text[doc.pages[i]:end]) == flat(" ".join(paragraphs))


def test_a_pdf_without_its_extension_is_found_by_its_header(make_pdf: Callable[..., Path]) -> None:
    path = make_pdf([["Hidden in a file with no extension."]], name="download")
    assert read_document(path).kind == "pdf"


def test_an_encrypted_pdf_is_refused(make_pdf: Callable[..., Path]) -> None:
    refused(make_pdf([["secret"]], name="locked.pdf", user_password="pw"), "encrypted")


def test_a_pdf_with_only_an_owner_password_opens(make_pdf: Callable[..., Path]) -> None:
    doc = read_document(make_pdf([["Readable by anyone."]], name="restricted.pdf", owner_password="o"))
    assert "Readable by anyone." in doc.text


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_a_truncated_pdf_is_refused(make_pdf: Callable[..., Path], tmp_path: Path, keep: float) -> None:
    data = make_pdf([["some words"], ["more words"]]).read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(data[: int(len(data) * keep)])
    refused(cut, "truncated")


def test_random_bytes_after_a_pdf_header_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.pdf"
    path.write_bytes(b"%PDF-1.7\n" + os.urandom(200_000) + b"\n%%EOF\n")
    refused(path, "damaged or not a PDF")


def test_a_pdf_that_is_not_a_pdf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fake.pdf"
    path.write_text("just text")
    refused(path, "not a PDF")


def test_a_pdf_with_too_many_pages_is_refused(make_pdf: Callable[..., Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "MAX_PDF_PAGES", 3)
    refused(make_pdf([["x"]] * 4, name="long.pdf"), "4 pages", "at most 3")


def test_a_pdf_without_text_is_refused(make_pdf: Callable[..., Path]) -> None:
    refused(make_pdf([[], []], name="scan.pdf"), "no text")


# -- .docx ---------------------------------------------------------------------------------

def test_a_docx_gives_its_paragraphs_one_a_line(tmp_path: Path) -> None:
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    xml = (f'<w:document xmlns:w="{w}"><w:body>'
           "<w:p><w:r><w:t>Hello </w:t></w:r><w:r><w:t>world &amp; more</w:t></w:r></w:p>"
           "<w:p><w:r><w:t>a</w:t><w:tab/><w:t>b</w:t><w:br/><w:t>c</w:t></w:r></w:p>"
           "<w:p><w:r><w:delText>deleted</w:delText><w:instrText>PAGE</w:instrText></w:r></w:p>"
           "<w:tbl><w:tr><w:tc><w:p><w:r><w:t>in a cell</w:t></w:r></w:p></w:tc></w:tr></w:tbl>"
           "</w:body></w:document>").encode()
    doc = read_document(write_docx(tmp_path / "letter.docx", xml))
    assert doc.kind == "docx"
    assert doc.text == "Hello world & more\na\tb\nc\n\nin a cell"


def test_a_docx_declaring_entities_is_refused(tmp_path: Path) -> None:
    laughs = ('<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;">'
              '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>')
    path = write_docx(tmp_path / "laughs.docx", docx_xml(["&lol3;"], doctype=laughs))
    refused(path, "DOCTYPE")


def test_a_docx_with_an_external_entity_is_refused(tmp_path: Path) -> None:
    xxe = '<!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    refused(write_docx(tmp_path / "xxe.docx", docx_xml(["&x;"], doctype=xxe)), "DOCTYPE")


def test_a_zip_bomb_declaring_its_size_is_refused_unread(tmp_path: Path) -> None:
    deflated, crc = zeros_deflated(300)
    path = write_raw_zip(tmp_path / "bomb.docx", "word/document.xml", deflated, crc, 300 * 2**20)
    tracemalloc.start()
    try:
        refused(path, "too large")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def test_a_zip_bomb_lying_about_its_size_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    deflated, crc = zeros_deflated(300)
    path = write_raw_zip(tmp_path / "liar.docx", "word/document.xml", deflated, crc, 1000)
    tracemalloc.start()
    try:
        refused(path, "damaged")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def test_unpacking_stops_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("engine.documents.extract.MAX_PACKED_BYTES", 2**20)
    xml = docx_xml(["word " * 300_000])  # 1.5 MB of XML, declared honestly
    refused(write_docx(tmp_path / "big.docx", xml), "too large")
    assert formats.docx_text((tmp_path / "big.docx").read_bytes(), 2 * 2**20).startswith("word word")


def test_a_docx_compressed_with_bzip2_is_refused(tmp_path: Path) -> None:
    path = write_docx(tmp_path / "odd.docx", docx_xml(["hi"]), compression=zipfile.ZIP_BZIP2)
    refused(path, "compressed in a way")


@pytest.mark.parametrize(("content", "words"), [
    (b"not a zip at all", "not a .docx"),
    (None, "no word/document.xml"),
    (b"<w:document><w:p>", "not well-formed"),
])
def test_broken_docx_files_are_refused(tmp_path: Path, content: bytes | None, words: str) -> None:
    path = tmp_path / "broken.docx"
    if content is None:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("word/other.xml", "<x/>")
    elif content.startswith(b"<"):
        write_docx(path, content)
    else:
        path.write_bytes(content)
    refused(path, words)


# -- HTML ----------------------------------------------------------------------------------

def test_html_gives_readable_text(tmp_path: Path) -> None:
    page = """<!DOCTYPE html><html><head><title>The  Title</title>
      <style>body { color: red }</style><script>var x = "<p>not text</p>";</script></head>
      <body><h1>Heading</h1><p>First   paragraph with &amp; &lt;tags&gt; and&nbsp;caf&eacute;.</p>
      <ul><li>one</li><li><b>two</b> items</li></ul>
      <p>Line<br>break</p><pre>  indented
    code</pre><table><tr><td>a</td><td>b</td></tr></table>
      <noscript>enable js</noscript><div>End</div></body></html>"""
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    doc = read_document(path)
    assert doc.kind == "html"
    assert doc.text == ("The Title\n\nHeading\n\nFirst paragraph with & <tags> and\u00a0caf\u00e9.\n\n"
                        "- one\n- two items\n\nLine\nbreak\n\n  indented\n    code\n\na\tb\n\nEnd")


def test_html_in_a_declared_legacy_charset(tmp_path: Path) -> None:
    path = tmp_path / "old.htm"
    path.write_bytes('<meta charset="windows-1252"><p>caf\u00e9 \u201cquoted\u201d</p>'.encode("cp1252"))
    assert read_document(path).text == "caf\u00e9 \u201cquoted\u201d"


def test_html_that_is_not_utf8_and_declares_nothing_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mystery.html"
    path.write_bytes("<p>caf\u00e9</p>".encode("latin-1"))
    refused(path, "not UTF-8")
