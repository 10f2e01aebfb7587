"""Real files for the document tests: PDFs written by fpdf2, .docx and zip files built with
zipfile (or by hand, where a test needs a zip that lies about its size)."""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

from fpdf import FPDF

FILLER = (
    "The committee met in the long room above the library and read the minutes of the last "
    "meeting aloud. Nobody objected to the budget for the new roof, though several members "
    "asked whether the gutters would be replaced as well.",
    "Rain fell through most of the afternoon, and the gardeners moved the seedlings into the "
    "greenhouse before the wind could flatten them. The orchard will need pruning in spring.",
    "A short history of the town notes that the bridge was rebuilt twice, first in timber and "
    "later in stone, after floods carried away the older crossing and the mill beside it.",
)


def code_sentence(n: int) -> str:
    return f"The code word on page {n} is ZEBRA-{n}."


def write_pdf(path: Path, pages: Sequence[Sequence[str]], *, user_password: str | None = None,
              owner_password: str | None = None) -> Path:
    """A PDF whose page i holds the paragraphs ``pages[i]`` (Helvetica, so Latin-1 text)."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for paragraphs in pages:
        pdf.add_page()
        for paragraph in paragraphs:
            pdf.multi_cell(0, 6, paragraph)
            pdf.ln(4)
    if owner_password is not None or user_password is not None:
        pdf.set_encryption(owner_password=owner_password or "owner", user_password=user_password)
    pdf.output(str(path))
    return path


def docx_xml(paragraphs: Sequence[str], doctype: str = "") -> bytes:
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = "".join(f"<w:p><w:r><w:t xml:space=\"preserve\">{p}</w:t></w:r></w:p>" for p in paragraphs)
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n{doctype}'
            f'<w:document xmlns:w="{w}"><w:body>{body}</w:body></w:document>').encode()


def write_docx(path: Path, xml: bytes, *, compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        z.writestr("word/document.xml", xml)
    return path


def zeros_deflated(mib: int) -> tuple[bytes, int]:
    """A raw deflate stream of ``mib`` MiB of zeros, made in milliseconds: one MiB compressed
    after a full flush (no back-reference crosses it) and repeated; and its CRC-32."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(2**20)) + c.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(bytes(2**20), crc)
    return block * mib + c.flush(), crc


def write_raw_zip(path: Path, name: str, deflated: bytes, crc: int, claimed_size: int) -> Path:
    """A one-member zip whose headers claim ``claimed_size`` bytes unpacked, true or not."""
    fname = name.encode()
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(deflated),
                        claimed_size, len(fname), 0) + fname
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc,
                          len(deflated), claimed_size, len(fname), 0, 0, 0, 0, 0, 0) + fname
    offset = len(local) + len(deflated)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), offset, 0)
    path.write_bytes(local + deflated + central + end)
    return path
