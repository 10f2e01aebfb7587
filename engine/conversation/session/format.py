"""The ``.duet`` session file: conversation text plus the KV states that let it reopen at once.

Layout, all integers little-endian::

    header    magic b"DUETSESS" | version u16 | flags u16 (0) | meta_len u32 | blake3(meta) 32B
    metadata  meta_len bytes of UTF-8 JSON (engine.conversation.session.meta.SessionMeta)
    sections  repeated: name_len u8 | name (ASCII) | payload_len u64 | blake3(payload) 32B | payload

Reading rules: every length is checked against the bytes that remain in the file (and the metadata
against MAX_META_BYTES) before anything is allocated, so memory stays bounded by the file size
whatever the file claims. Header or metadata damage raises SessionError (nothing is usable);
section damage only drops that section and adds a one-line problem, so the caller can rebuild the
KV state from the text. Older formats are upgraded by MIGRATIONS (metadata JSON of version v to
v+1; the binary layout is shared), newer ones are refused with a message to update Duet.

Format 2 (current) adds to each KV state a probe of the model's predictions after its last
tokens, checked on opening (engine.conversation.session.probe); format 1 files open from their text. What a
file may hold is bounded (engine.conversation.session.meta: MAX_MESSAGES, MAX_MESSAGE_CHARS, MAX_TEXT_CHARS;
MAX_META_BYTES here). Checksums and the probe are integrity checks, not a signature.
Only regular files are read or written; a symlink is written through to its target.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from blake3 import blake3

from engine.conversation.session.meta import FORMAT_VERSION, SessionMeta, migrate_v1
from engine.errors import SessionError
from engine.localfile import atomic_write

log = logging.getLogger(__name__)

MAGIC = b"DUETSESS"
SUFFIX = ".duet"
MAX_META_BYTES = 64 * 1024 * 1024
MAX_NAME = 64
HEADER = struct.Struct("<8sHHI32s")  # magic, version, flags, meta_len, blake3(meta)
SECTION_TAIL = struct.Struct("<Q32s")  # payload_len, blake3(payload); follows name_len + name
_NAME_RE = re.compile(rb"[a-z0-9][a-z0-9._-]*")
_HASH_CHUNK = 8 * 1024 * 1024

#: MIGRATIONS[v] turns the metadata JSON of format v into that of format v + 1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: migrate_v1}


@dataclass(frozen=True)
class SectionInfo:
    """One section as found in a file. ``valid`` is None when its checksum was not checked."""

    name: str
    offset: int  # of the section header
    size: int  # declared payload length
    valid: bool | None
    problem: str | None = None


@dataclass(frozen=True)
class Problem:
    """One line on damage found past the metadata. ``section`` names the section it is about;
    None for damage to the file's structure, after which no further section can be found."""

    text: str
    section: str | None = None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class LoadedSession:
    """``sections`` holds the requested sections that were intact; ``problems`` one for each
    requested or expected section that was damaged or missing, and for structural damage."""

    meta: SessionMeta
    sections: dict[str, bytes] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def problem(self, section: str) -> str | None:
        """The line on what went wrong with ``section``, or None."""
        return next((p.text for p in self.problems if p.section == section), None)


class _Short(Exception):
    """The file ended before a read that its checked lengths promised (it shrank meanwhile)."""


# ─── writing ──────────────────────────────────────────────────────────────────


def encode_meta(meta: SessionMeta) -> bytes:
    """The metadata JSON as written. Refuses (SessionError) what the reader would reject."""
    obj = meta.to_json()
    try:
        SessionMeta.from_json(obj)
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (SessionError, ValueError, TypeError) as e:
        raise SessionError(f"cannot save this conversation: {e}") from e
    try:
        blob = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: let JSON escape them
        blob = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("ascii")
    if len(blob) > MAX_META_BYTES:
        raise SessionError("cannot save this conversation: its text is too large")
    return blob


def _byte_view(payload: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(payload)
    if not view.c_contiguous:
        raise ValueError("a section payload must be a contiguous buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _section_parts(meta: SessionMeta, sections: Mapping[str, bytes | memoryview]
                   ) -> list[tuple[bytes, memoryview]]:
    """(section header, payload view) for each section; checks names and kv consistency."""
    kv_names = {n for n in sections if n.startswith("kv.")}
    if kv_names != meta.expected_sections():
        raise ValueError(f"KV sections {sorted(kv_names)} do not match the metadata's "
                         f"{sorted(meta.expected_sections())}")
    parts = []
    for name, payload in sections.items():
        raw = name.encode("ascii", "replace")
        if len(raw) > MAX_NAME or not _NAME_RE.fullmatch(raw):
            raise ValueError(f"bad section name {name!r}")
        view = _byte_view(payload)
        digest = blake3(view, max_threads=blake3.AUTO).digest()
        parts.append((bytes([len(raw)]) + raw + SECTION_TAIL.pack(view.nbytes, digest), view))
    return parts


def write_session(path: Path, meta: SessionMeta, sections: Mapping[str, bytes | memoryview]
                  ) -> int:
    """Atomically write ``meta`` and ``sections`` to ``path``; returns the bytes written.

    Written through engine.localfile.atomic_write (durable): a crash or an exception leaves the
    previous file intact. A symlink is followed (its target is replaced, the link kept), the
    file keeps its permission bits, and anything but a regular file is refused. Payloads are
    hashed (blake3, all cores) and written straight from their buffers.
    ``kv.<role>`` sections must match the metadata's ``kv_<role>`` entries."""
    path = _write_target(Path(path))
    blob = encode_meta(meta)
    parts = _section_parts(meta, sections)
    header = HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(blob), blake3(blob).digest())
    with atomic_write(path, private=False) as f:  # a document the user may share
        total = f.write(header) + f.write(blob)
        for head, payload in parts:
            total += f.write(head) + f.write(payload)
    log.debug("saved %s: %d bytes, sections %s", path, total, list(sections))
    return total


def _write_target(path: Path) -> Path:
    """Where saving to ``path`` writes: the file a symlink points to (the link stays a link),
    ``path`` itself otherwise. Refuses a symlink loop and anything but a regular file."""
    try:
        st = os.stat(path)  # follows links
    except FileNotFoundError:
        st = None
    except OSError as e:  # ELOOP and friends
        raise SessionError(f"cannot save to {path}: {e.strerror or e}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise SessionError(f"cannot save to {path}: it is not a regular file")
    if os.path.islink(path):
        target = Path(os.path.realpath(path))
        log.debug("%s is a link; saving to %s", path, target)
        return target
    return path


# ─── reading ──────────────────────────────────────────────────────────────────


def _read_exact(f: IO[bytes], n: int) -> bytes:
    """Exactly ``n`` bytes (the caller has checked they exist), else _Short."""
    data = f.read(n)
    if len(data) == n:
        return data
    chunks = [data]  # only past the ~2 GiB single-read limit, or if the file shrank
    got = len(data)
    while got < n:
        more = f.read(n - got)
        if not more:
            raise _Short()
        chunks.append(more)
        got += len(more)
    return b"".join(chunks)


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[tuple[IO[bytes], int]]:
    """The file (unbuffered, so reads are exact) and its size; OSError becomes SessionError.
    Anything but a regular file (a FIFO, a device, a folder) is refused before it could block."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise SessionError(f"{path} is not a regular file")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with open(fd, "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):  # swapped in between
                raise SessionError(f"{path} is not a regular file")
            yield f, st.st_size
    except FileNotFoundError:
        raise SessionError(f"session file not found: {path}") from None
    except OSError as e:
        raise SessionError(f"cannot read session file {path}: {e.strerror or e}") from None


def _migrate(obj: Any, version: int, name: str) -> Any:
    for v in range(version, FORMAT_VERSION):
        step = MIGRATIONS.get(v)
        if step is None:
            raise SessionError(f"{name} uses session format {version}, which this Duet cannot read")
        try:
            obj = step(obj)
        except Exception as e:  # a migration meeting a malformed old file
            raise SessionError(f"{name} could not be upgraded from format {v}: {e}"[:300]) from e
    return obj


def _read_head(f: IO[bytes], size: int, name: str) -> tuple[int, SessionMeta, int]:
    """(version, metadata, offset of the first section); SessionError on any damage."""
    raw = f.read(HEADER.size)
    if len(raw) < len(MAGIC) or raw[: len(MAGIC)] != MAGIC:
        raise SessionError(f"{name} is not a Duet session file")
    if len(raw) < HEADER.size:
        raise SessionError(f"{name} is truncated (incomplete header)")
    _, version, flags, meta_len, digest = HEADER.unpack(raw)
    if version > FORMAT_VERSION:
        raise SessionError(f"{name} was saved by a newer Duet (format {version}); update Duet")
    if flags != 0:
        raise SessionError(f"{name} has unknown header flags {flags:#06x}")
    if meta_len > size - HEADER.size:
        raise SessionError(f"{name} is truncated or damaged (metadata length {meta_len})")
    if meta_len > MAX_META_BYTES:
        raise SessionError(f"{name} claims {meta_len} bytes of metadata; refusing")
    try:
        blob = _read_exact(f, meta_len)
    except _Short:
        raise SessionError(f"{name} is truncated (metadata)") from None
    if blake3(blob).digest() != digest:
        raise SessionError(f"{name} is damaged: its conversation metadata fails its checksum")
    try:
        obj = json.loads(blob.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError included
        raise SessionError(f"{name} has unreadable metadata: {e}"[:300]) from None
    obj = _migrate(obj, version, name)
    return version, SessionMeta.from_json(obj), HEADER.size + meta_len


def _hash_stream(f: IO[bytes], n: int) -> bytes:
    hasher = blake3(max_threads=blake3.AUTO)
    buf = bytearray(min(n, _HASH_CHUNK))
    view = memoryview(buf)
    while n > 0:
        got = f.readinto(view[: min(n, len(buf))])  # type: ignore[attr-defined]  # files opened "rb" have it
        if not got:
            raise _Short()
        hasher.update(view[:got])
        n -= got
    return hasher.digest()


def _scan(f: IO[bytes], pos: int, size: int, load: Iterable[str], verify_all: bool
          ) -> tuple[list[SectionInfo], dict[str, bytes], list[Problem]]:
    """Walk the sections from ``pos``: (all found, intact payloads of ``load``, problems).

    Scanning stops at the first header that cannot be trusted (nothing after it can be located)."""
    load = set(load)
    infos: list[SectionInfo] = []
    payloads: dict[str, bytes] = {}
    problems: list[Problem] = []
    seen: set[str] = set()
    while pos < size:
        f.seek(pos)
        first = f.read(1)
        name_len = first[0] if first else 0
        start = pos + 1 + name_len + SECTION_TAIL.size
        if 0 < name_len <= MAX_NAME and start > size:
            problems.append(Problem(f"truncated section header at offset {pos}; "
                                    f"the last {size - pos} bytes were ignored"))
            break
        raw = f.read(name_len) if 0 < name_len <= MAX_NAME else b""
        tail = f.read(SECTION_TAIL.size) if raw else b""
        if len(raw) != name_len or not _NAME_RE.fullmatch(raw) or len(tail) != SECTION_TAIL.size:
            problems.append(Problem(f"unreadable section header at offset {pos}; "
                                    f"the last {size - pos} bytes were ignored"))
            break
        name = raw.decode("ascii")
        length, digest = SECTION_TAIL.unpack(tail)
        if length > size - start:
            short = f"section {name} is truncated: it claims {length} bytes but {size - start} remain"
            infos.append(SectionInfo(name, pos, length, False, short))
            problems.append(Problem(short, name))
            break
        valid: bool | None = None
        problem: str | None = None
        try:
            if name in seen:
                problem = f"section {name} appears twice; the second copy was ignored"
            elif name in load:
                data = _read_exact(f, length)
                valid = blake3(data, max_threads=blake3.AUTO).digest() == digest
                if valid:
                    payloads[name] = data
                del data
            elif verify_all:
                valid = _hash_stream(f, length) == digest
        except _Short:
            problem = f"section {name} is truncated (the file changed while being read)"
        if valid is False:
            problem = f"section {name} is damaged (checksum mismatch)"
        seen.add(name)
        infos.append(SectionInfo(name, pos, length, valid if problem is None else False, problem))
        if problem:
            problems.append(Problem(problem, name))
        pos = start + length
    return infos, payloads, problems


def _label(path: Path) -> str:
    return f"session file {path.name}"


def read_meta(path: Path) -> SessionMeta:
    """Only the header and metadata (the conversation text); sections are not looked at."""
    path = Path(path)
    with _opened(path) as (f, size):
        return _read_head(f, size, _label(path))[1]


def read_session(path: Path, *, want: Iterable[str] = ("kv.target", "kv.draft")
                 ) -> LoadedSession:
    """The metadata plus the intact sections named in ``want``.

    Raises SessionError when the header or metadata is damaged. A damaged, truncated or missing
    section (one the metadata says exists) is left out and described in ``problems``."""
    path = Path(path)
    want = tuple(want)
    with _opened(path) as (f, size):
        _, meta, pos = _read_head(f, size, _label(path))
        _, payloads, problems = _scan(f, pos, size, want, verify_all=False)
    expected = meta.expected_sections()
    for name in want:
        if name.startswith("kv.") and name in payloads and name not in expected:
            del payloads[name]
            problems.append(Problem(f"section {name} is not described by the metadata; it was "
                                    "ignored", name))
        elif name in expected and name not in payloads and not any(
                p.section == name for p in problems):
            problems.append(Problem(f"section {name} is missing", name))
    for p in problems:
        log.warning("%s: %s", path, p)
    return LoadedSession(meta, payloads, problems)


def inspect(path: Path) -> dict[str, Any]:
    """A JSON-ready summary for ``duet-cli session inspect``; every section's checksum is checked
    (streamed, bounded memory). Raises SessionError when the header or metadata is damaged."""
    path = Path(path)
    with _opened(path) as (f, size):
        version, meta, pos = _read_head(f, size, _label(path))
        infos, _, problems = _scan(f, pos, size, (), verify_all=True)
    found = {i.name for i in infos}
    problems += [Problem(f"section {n} is missing", n)
                 for n in sorted(meta.expected_sections() - found)]

    def model(info: Any) -> Any:
        return None if info is None else {"display_name": info.display_name, "path": info.path,
                                          "size": info.size, "fingerprint": info.fingerprint}

    def kv(role: str) -> Any:
        state = meta.kv(role)
        return None if state is None else {"tokens": len(state.tokens), "n_ctx": state.n_ctx,
                                           "type_k": state.type_k, "type_v": state.type_v}

    return {
        "path": str(path), "file_size": size, "format": version, "metadata_size": pos - HEADER.size,
        "created": meta.created, "saved": meta.saved, "messages": len(meta.messages),
        "models": {"target": model(meta.target), "draft": model(meta.draft)},
        "kv": {"target": kv("target"), "draft": kv("draft")},
        "sections": [{"name": i.name, "offset": i.offset, "size": i.size, "valid": bool(i.valid),
                      "problem": i.problem} for i in infos],
        "problems": [p.text for p in problems],
    }
