"""The packed kinds of document into text: PDF (pypdfium2), Word .docx (zipfile and expat) and
HTML (html.parser). Each takes the file's bytes, already size-checked by engine.documents.extract,
and returns text or raises ``Unreadable`` with the reason (extract adds the file's name).

PDF: pypdfium2 (Chrome's PDFium) over pypdf, measured on this machine (2 shared cores; best of 3
runs, two sessions; pypdfium2 5.15.2 / PDFium 159, pypdf 7.1.1) by a scratch script that wrote
PDFs with fpdf2 and compared the text each library gives back with the text written, and timed
both on two real manuals from /usr/share/doc:

    file                                            pypdf                  pypdfium2
    300 pages (fpdf2, Helvetica, a fact + filler)   0.61-0.77 s, 300/300   0.14-0.16 s, 300/300
    Unicode TTF text (Greek, Cyrillic, accents, €)  3/3                    3/3
    two columns; a matplotlib figure                2/2; 2/2               2/2; 2/2
    libtasn1.pdf (pdfTeX manual, 36 pages)          1.04-1.14 s            0.07 s
    shared-mime-info-spec.pdf (17 pages)            0.41-0.43 s            0.03-0.04 s

(n/m: written sentences found verbatim, words in order with single spaces.) The two agree on
99% of the words of the real manuals; where they differ PDFium is the better: it joins words
hyphenated at a line end ("manipulation"; pypdf: "manip- ulation") and adds no space before the
dots of a table of contents ("parsing." where pypdf gives "parsing ."). Both refuse truncated,
encrypted and random-after-the-header files. PDFium is 4 to 15 times faster and is the PDF
engine of Chrome, fuzzed without pause; pypdf, pure Python, has had several denial-of-service
advisories (endless loops, memory blown up by crafted streams). The cost: a native wheel, and
PDFium is not thread-safe, so every call into it holds ``_PDFIUM_LOCK``.

A PDF must also look whole: ``%PDF-`` in its first KiB and ``%%EOF`` in its last (the rule
Acrobat applies), which refuses a truncated download even where PDFium would rebuild part of it.
More than ``MAX_PDF_PAGES`` pages is refused rather than read for minutes.

.docx: only ``word/document.xml`` is read, stored or deflated (bzip2 and LZMA, which Word never
writes, can inflate without bound in one step and are refused); its declared size is checked and
it is read with a hard cap, so a member that lies about its size cannot inflate past the cap.
The XML is parsed by expat with any DOCTYPE refused (no entity can be declared, so no "billion
laughs" and no external entity).
"""

from __future__ import annotations

import codecs
import io
import logging
import re
import threading
import zipfile
import zlib
from html.parser import HTMLParser
from typing import TYPE_CHECKING
from xml.parsers import expat

if TYPE_CHECKING:
    import pypdfium2 as pdfium

log = logging.getLogger(__name__)

MAX_PDF_PAGES = 2000
_PIECE = 2**16
_PDFIUM_LOCK = threading.Lock()
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main "  # expat's "uri name"
# PDFium marks a word hyphenated at a line end with \x02; other C0 controls are noise to a model.
_CONTROLS = {c: None for c in range(32) if c not in (9, 10)} | {0xFFFE: None, 0xFFFF: None}


class Unreadable(ValueError):
    """A document's bytes that give no text: the reason, without the file's name."""


# -- PDF -----------------------------------------------------------------------------------

def pdf_text(data: bytes) -> tuple[str, tuple[int, ...]]:
    """The text of a PDF's pages, a blank line between pages, and where each page starts."""
    if b"%PDF-" not in data[:1024]:
        raise Unreadable("it is not a PDF (it has no PDF header)")
    if b"%%EOF" not in data[-1024:]:
        raise Unreadable("it is truncated or damaged (it has no end-of-file marker)")
    with _PDFIUM_LOCK:
        try:
            pages = _pdf_pages(data)
        except Unreadable:
            raise
        except Exception as e:  # a native library on a stranger's file: any failure is a refusal
            log.info("PDFium failed on a PDF: %r", e)
            raise Unreadable("it is damaged or not a PDF") from None
    if not any(p.strip() for p in pages):
        raise Unreadable("it has no text layer (scanned pages need OCR first)")
    starts, offset = [], 0
    for p in pages:
        starts.append(offset)
        offset += len(p) + 2
    return "\n\n".join(pages), tuple(starts)


def _pdf_pages(data: bytes) -> list[str]:
    # lazy: pypdfium2 (PDFium, ~30 ms of import) only when a PDF is read
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        doc = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        if e.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            raise Unreadable("it is encrypted (it needs a password)") from None
        if e.err_code == pdfium_c.FPDF_ERR_SECURITY:
            raise Unreadable("it is protected in a way Duet cannot open") from None
        raise Unreadable("it is damaged or not a PDF") from None
    try:
        n = len(doc)
        if n > MAX_PDF_PAGES:
            raise Unreadable(f"it has {n:,} pages; Duet reads at most {MAX_PDF_PAGES:,}")
        return [_page_text(doc, i, pdfium.PdfiumError) for i in range(n)]
    finally:
        doc.close()


def _page_text(doc: pdfium.PdfDocument, i: int, failure: type[Exception]) -> str:
    """Page ``i``'s text; a damaged page is left empty rather than costing the others."""
    try:
        page = doc[i]
        try:
            textpage = page.get_textpage()
            try:
                raw = textpage.get_text_bounded()
            finally:
                textpage.close()
        finally:
            page.close()
    except failure as e:
        log.warning("page %d of a PDF gives no text: %s", i + 1, e)
        return ""
    text = raw.replace("\r\n", "\n").replace("\r", "\n").translate(_CONTROLS)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


# -- Word .docx ----------------------------------------------------------------------------

def docx_text(data: bytes, cap: int) -> str:
    """The paragraphs of a .docx's main text, one a line; ``cap``: most bytes of XML read."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError):
        raise Unreadable("it is not a .docx file (it is damaged, or protected by a password)") from None
    with zf:
        try:
            info = zf.getinfo("word/document.xml")
        except KeyError:
            raise Unreadable("it is not a Word document (it has no word/document.xml)") from None
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise Unreadable("it is compressed in a way Word does not write")
        if info.file_size > cap:
            raise Unreadable(f"its text is too large ({info.file_size:,} bytes unpacked)")
        try:
            xml = _unpack(zf, info, cap)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError,
                NotImplementedError, ValueError):
            raise Unreadable("it is damaged (its text does not unpack)") from None
    return _docx_paragraphs(xml)


def _unpack(zf: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int) -> bytes:
    """The member's bytes, unpacked a small piece at a time (zipfile inflates up to what one
    read asks for, so one large read would allocate the cap whatever the member holds)."""
    chunks: list[bytes] = []
    total = 0
    with zf.open(info) as member:
        while chunk := member.read(_PIECE):
            total += len(chunk)
            if total > cap:
                raise Unreadable("its text is too large (it unpacks past the limit)")
            chunks.append(chunk)
    return b"".join(chunks)


def _docx_paragraphs(xml: bytes) -> str:
    paragraphs: list[str] = []
    run: list[str] = []
    in_text = False

    def refuse(*_: object) -> None:
        raise Unreadable("it is not a safe Word document (its XML declares a DOCTYPE)")

    def start(tag: str, _attrs: object) -> None:
        nonlocal in_text
        if tag == _W + "t":
            in_text = True
        elif tag == _W + "tab":
            run.append("\t")
        elif tag in (_W + "br", _W + "cr"):
            run.append("\n")

    def end(tag: str) -> None:
        nonlocal in_text
        if tag == _W + "t":
            in_text = False
        elif tag == _W + "p":
            paragraphs.append("".join(run))
            run.clear()

    def data(text: str) -> None:
        if in_text:  # w:t only: not deleted text (w:delText) nor field codes (w:instrText)
            run.append(text)

    parser = expat.ParserCreate(namespace_separator=" ")
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = data
    try:
        parser.Parse(xml, True)
    except expat.ExpatError:
        raise Unreadable("it is damaged (its XML is not well-formed)") from None
    return "\n".join(paragraphs)


# -- HTML ----------------------------------------------------------------------------------

_SKIP = {"script", "style", "noscript", "template", "svg", "math"}
_PARAGRAPH = {"p", "div", "section", "article", "aside", "header", "footer", "nav", "main",
              "blockquote", "pre", "table", "ul", "ol", "dl", "figure", "form", "fieldset",
              "h1", "h2", "h3", "h4", "h5", "h6", "hr", "title", "details", "address"}
_LINE = {"br", "li", "tr", "dt", "dd", "figcaption", "caption", "summary", "option"}
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


class _HtmlText(HTMLParser):
    """Readable text: no script or style, a blank line at each block, a line at each
    ``br``/``li``/row, spaces collapsed outside ``pre``, entities decoded. (``head`` is not
    skipped as a whole: its end tag is optional, and its title is worth keeping.)"""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self.skip += 1
        elif tag == "pre":
            self.pre += 1
        self._block(tag, opening=True)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP and self.skip:
            self.skip -= 1
        elif tag == "pre" and self.pre:
            self.pre -= 1
        self._block(tag, opening=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._block(tag, opening=True)

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if not self.pre:
            data = re.sub(r"[ \t\n\r\f]+", " ", data)  # HTML's white space: not a no-break space
            if not self.out or self.out[-1].endswith("\n") or self.out[-1] in ("\n- ", "\t"):
                data = data.lstrip(" ")  # a line does not start with the space before a tag
        self.out.append(data)

    def _block(self, tag: str, *, opening: bool) -> None:
        if self.skip:
            return
        if tag in _PARAGRAPH:
            self.out.append("\n\n")
        elif tag in _LINE and opening:
            self.out.append("\n- " if tag == "li" else "\n")
        elif tag in ("td", "th") and opening and self.out and not self.out[-1].endswith("\n"):
            self.out.append("\t")

    def text(self) -> str:
        lines = (line.rstrip() for line in "".join(self.out).split("\n"))
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def html_text(data: bytes) -> str:
    """The readable text of an HTML page (UTF-8, or the charset it declares)."""
    if b"\0" in data:
        raise Unreadable("it is not text (it holds NUL bytes)")
    try:
        source = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        declared = _CHARSET.search(data[:4096])
        try:
            encoding = codecs.lookup(declared.group(1).decode("ascii")).name if declared else ""
        except LookupError:
            encoding = ""
        if not encoding:
            raise Unreadable("it is not UTF-8 and declares no encoding Duet knows") from None
        source = data.decode(encoding, errors="replace")
    parser = _HtmlText()
    parser.feed(source)
    parser.close()
    return parser.text()
