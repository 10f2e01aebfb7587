"""Files attached to a chat, read safely into text: a ``Document``, or a one-line
``DocumentError`` naming the file.

A file is opened once, without following it anywhere it could block: ``O_NONBLOCK`` (a FIFO
opens at once even with no writer), then ``fstat`` on that descriptor decides everything else,
so what is checked is what is read (no stat-then-open race). Only regular files are read (a
FIFO, a device such as /dev/zero, a folder: refused). The size limit is checked on the
descriptor BEFORE a byte is read, so a 2 GB file is refused at once. The bytes are read from the
same descriptor, and the file is refused if its size or mtime changed meanwhile, or if its name
no longer leads to it (removed or replaced while it was read): the text is then of no one
version of the file. (A rewrite of the same length within the filesystem's mtime tick cannot be
seen; nothing short of locking could, and editors do not lock.)

Limits: ``MAX_TEXT_BYTES`` (16 MiB) for text, Markdown, code and HTML, about four million
tokens, far more than any local context takes whole and still split and indexed in well under
a second; a larger "text" file is a log or a data dump, not something to chat about.
``MAX_PACKED_BYTES`` (64 MiB) for PDF and .docx, whose bytes are mostly fonts, images and
compression: a 1,000-page text-heavy book is a few MiB, a scanned one tens of MiB (and has no
text to give anyway).

Kinds come from the name's extension; an unknown extension is read as text if it decodes as
UTF-8 (a PDF without its extension is still found by its ``%PDF-`` header). Text must be UTF-8
(a BOM is allowed and dropped) and hold no NUL byte. Line ends become ``\\n``; nothing else is
changed, so chat-template markup in a file stays the file's text (engine.chat.fit keeps a
message's text from becoming markup). The PDF, .docx and HTML readers are in
engine.documents.formats.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from engine.documents.formats import Unreadable, docx_text, html_text, pdf_text
from engine.errors import DuetError

log = logging.getLogger(__name__)

MAX_TEXT_BYTES = 16 * 2**20
MAX_PACKED_BYTES = 64 * 2**20
_CHUNK = 2**20

_MARKDOWN = {".md", ".markdown", ".mdown", ".mkd"}
_CODE = {".py", ".pyi", ".js", ".mjs", ".jsx", ".ts", ".tsx", ".c", ".h", ".cc", ".cpp", ".cxx",
         ".hpp", ".hh", ".rs", ".go", ".java", ".kt", ".kts", ".scala", ".swift", ".m", ".mm",
         ".cs", ".fs", ".rb", ".php", ".pl", ".pm", ".lua", ".r", ".jl", ".dart", ".zig", ".nim",
         ".hs", ".ml", ".ex", ".exs", ".erl", ".clj", ".el", ".lisp", ".scm", ".sql", ".sh",
         ".bash", ".zsh", ".fish", ".ps1", ".bat", ".cmd", ".vue", ".svelte", ".css", ".scss",
         ".less", ".json", ".jsonl", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".xml",
         ".proto", ".gradle", ".cmake", ".mk", ".tex", ".diff", ".patch"}
_TEXT = {".txt", ".text", ".log", ".csv", ".tsv", ".rst", ".org", ".adoc", ".srt", ".vtt"}
_PACKED = {".pdf": "pdf", ".docx": "docx"}
_HTML = {".html", ".htm", ".xhtml"}


class DocumentError(DuetError):
    """A file that cannot be attached: its one-line message names it and says why."""


@dataclass(frozen=True)
class Document:
    """A file's text as read once. ``sha256`` is of the bytes the text came from, ``size`` their
    count; ``pages`` (PDF only) the offset in ``text`` where each page starts."""

    name: str
    kind: str  # text, markdown, code, pdf, docx or html
    text: str
    sha256: str
    size: int
    pages: tuple[int, ...] = ()


def read_document(path: Path) -> Document:
    """The document at ``path``; DocumentError if it cannot or should not be read."""
    path = Path(path)
    name = path.name or str(path)
    data = _read_file(path, _shown(name), _limit(kind_of(name)))
    return _document(name, data)


def document_from_bytes(name: str, data: bytes) -> Document:
    """A document of bytes the user pasted or dropped, ``name`` deciding the kind."""
    limit = _limit(kind_of(name))
    if len(data) > limit:
        raise DocumentError(_too_large(_shown(name), len(data), limit))
    return _document(name, bytes(data))


def kind_of(name: str) -> str:
    """The kind a file's name says (``text`` for an unknown extension, to be confirmed)."""
    ext = os.path.splitext(name)[1].lower()
    if ext in _PACKED:
        return _PACKED[ext]
    if ext in _HTML:
        return "html"
    if ext in _MARKDOWN:
        return "markdown"
    if ext in _CODE:
        return "code"
    return "text"


def _document(name: str, data: bytes) -> Document:
    """The document of ``data``, named ``name`` with its control characters made "?" (a name is
    shown and put into prompts; a newline in it would be taken for a new line of text)."""
    name = _printable(name)
    kind = kind_of(name)
    unknown = kind == "text" and os.path.splitext(name)[1].lower() not in _TEXT
    if unknown and data[:5] == b"%PDF-":
        kind = "pdf"  # a PDF saved without its extension
    pages: tuple[int, ...] = ()
    try:
        if kind == "pdf":
            text, pages = pdf_text(data)
        elif kind == "docx":
            text = docx_text(data, MAX_PACKED_BYTES)
        elif kind == "html":
            text = html_text(data)
        else:
            text = decode_text(data)
    except Unreadable as e:
        why = "it is not a kind of file Duet reads (text, PDF, .docx or HTML)" if unknown else e
        raise DocumentError(f"cannot read {_shown(name)}: {why}") from None
    log.debug("read %s: %s, %d bytes, %d characters", name, kind, len(data), len(text))
    return Document(name, kind, text, hashlib.sha256(data).hexdigest(), len(data), pages)


def decode_text(data: bytes) -> str:
    """``data`` as UTF-8 text (a BOM dropped, line ends made ``\\n``); Unreadable otherwise."""
    if b"\0" in data:
        raise Unreadable("it is not text (it holds NUL bytes)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Unreadable("it is not text (it is not valid UTF-8)") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _limit(kind: str) -> int:
    return MAX_PACKED_BYTES if kind in ("pdf", "docx") else MAX_TEXT_BYTES


def _printable(name: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in name)


def _shown(name: str) -> str:
    """``name`` on one line (a file name may hold a newline) and of a length fit to show."""
    flat = _printable(name)
    return flat if len(flat) <= 120 else flat[:80] + "…" + flat[-30:]


def _too_large(name: str, size: int, limit: int) -> str:
    return f"cannot read {name}: it is too large ({_mib(size)}; the limit for this kind is {_mib(limit)})"


def _mib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _read_file(path: Path, name: str, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, read through one descriptor (see above)."""
    flags = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
             | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise DocumentError(f"cannot read {name}: no such file") from None
    except IsADirectoryError:
        raise DocumentError(f"cannot read {name}: it is a folder, not a file") from None
    except OSError as e:
        raise DocumentError(f"cannot read {name}: {e.strerror or 'it cannot be opened'}") from None
    try:
        before = os.fstat(fd)
        _check_regular(before, name)
        if before.st_size > limit:
            raise DocumentError(_too_large(name, before.st_size, limit))
        data = _read_all(fd, before.st_size)
        after = os.fstat(fd)
    except OSError as e:
        raise DocumentError(f"cannot read {name}: {e.strerror or 'reading it failed'}") from None
    finally:
        os.close(fd)
    if (len(data), after.st_size, after.st_mtime_ns) != (before.st_size, before.st_size,
                                                        before.st_mtime_ns):
        raise DocumentError(f"cannot read {name}: it changed while it was read; try again")
    try:
        now = os.stat(path)
    except FileNotFoundError:
        raise DocumentError(f"cannot read {name}: it was removed while it was read") from None
    except OSError as e:
        raise DocumentError(f"cannot read {name}: {e.strerror or 'it cannot be found'}") from None
    if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
        raise DocumentError(f"cannot read {name}: it was replaced while it was read; try again")
    return data


def _check_regular(st: os.stat_result, name: str) -> None:
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return
    what = ("a folder" if stat.S_ISDIR(mode) else "a pipe (FIFO)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a special file")
    raise DocumentError(f"cannot read {name}: it is {what}, not a file")


def _read_all(fd: int, size: int) -> bytes:
    """Up to ``size`` + 1 bytes of ``fd`` (one more than fstat said shows a file that grew)."""
    chunks: list[bytes] = []
    left = size + 1
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
