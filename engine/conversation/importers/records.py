"""An export's records, read one at a time: the elements of a top-level JSON array (a
``conversations.json`` of 10,000 conversations is never held whole), a single JSON object, or
a Markdown file's text; from the file, or from ``conversations.json`` in a zip; or each
conversation's JSON in a zip of Duet's export of everything (engine.conversation.archive: its
``manifest.json`` lists them).

Memory: the text of one record at a time (a record is decoded by the standard library from a
window that doubles until the record fits, so a long record costs about twice its size).
A record that is not valid JSON, or nested deeper than the decoder goes, is yielded as an
ImportFailure in its place; the records before it are intact, the ones after it are lost only
when the array's structure itself is broken (there is no telling where the next one starts).
"""

from __future__ import annotations

import codecs
import io
import json
import os
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from engine.conversation.archive import MANIFEST
from engine.conversation.importers.base import ImportFailure, fail
from engine.conversation.projects import Project, clean_name, file_from

CHUNK = 1 << 20
MAX_RECORD = 512 << 20  # characters of one record (a whole single-object file included)
MAX_MARKDOWN = 64 << 20
_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Markdown:
    """A Markdown file's text (Duet's own export)."""

    text: str


class Records:
    """Iterate to get ``(index, record or ImportFailure)``; ``done`` and ``total`` are bytes of
    the (uncompressed) stream read so far and in all, for progress."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.done = 0
        self.total = 0
        self.projects: list[Project] = []  # those a Duet export describes (once it is read)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        try:
            archive = self._library_zip()
            if archive is not None:
                with archive:
                    yield from self._library(archive)
                return
            with self._open() as raw:
                if self.path.suffix.lower() in (".md", ".markdown"):
                    yield 0, self._markdown(raw)
                    return
                yield from _Stream(raw, self).records()
        except (OSError, zipfile.BadZipFile, RuntimeError) as e:  # RuntimeError: an encrypted zip
            raise fail(f"cannot read {self.path.name}: {getattr(e, 'strerror', None) or e}") from None

    def _library_zip(self) -> zipfile.ZipFile | None:
        """The zip, if it is Duet's export of everything (a manifest, no conversations.json)."""
        if not stat.S_ISREG(os.stat(self.path).st_mode):  # a FIFO would block, a folder fail
            raise fail(f"{self.path.name} is not a regular file")
        if not zipfile.is_zipfile(self.path):
            return None
        zf = zipfile.ZipFile(self.path)
        names = {Path(n).name for n in zf.namelist()}
        if MANIFEST in zf.namelist() and "conversations.json" not in names:
            return zf
        zf.close()
        return None

    def _library(self, zf: zipfile.ZipFile) -> Iterator[tuple[int, Any]]:
        manifest = self._member(zf, MANIFEST)
        if not isinstance(manifest, dict) or manifest.get("app") != "duet" or \
                not isinstance(manifest.get("conversations"), list):
            raise fail(f"{self.path.name} is not a Duet export: its {MANIFEST} is not Duet's")
        names = [e.get("json") if isinstance(e, dict) else None for e in manifest["conversations"]]
        members = {i.filename: i for i in zf.infolist()}
        self.total = self.done + sum(members[n].file_size for n in names
                                     if isinstance(n, str) and n in members)  # (for progress)
        for i, name in enumerate(names):
            try:
                if not isinstance(name, str):
                    raise fail(f"its entry in {MANIFEST} names no JSON file")
                yield i, self._member(zf, name)
            except ImportFailure as e:
                yield i, e
        projects = manifest.get("projects")
        found = (self._project(zf, e) for e in (projects if isinstance(projects, list) else ()))
        self.projects = [p for p in found if p is not None]

    def _project(self, zf: zipfile.ZipFile, entry: Any) -> Project | None:
        """A project of the manifest (None: not one); a file whose record cannot be read is
        left out of it."""
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or \
                not clean_name(entry["name"]):
            return None
        files = []
        listed = entry.get("files")
        for f in listed if isinstance(listed, list) else ():
            if isinstance(f, dict) and all(isinstance(f.get(k), str)
                                           for k in ("name", "sha256", "json")):
                try:
                    a = file_from(f["name"], f["sha256"], self._member(zf, f["json"]))
                except ImportFailure:
                    a = None
                if a is not None:
                    files.append(a)
        prompt, preset = entry.get("system_prompt"), entry.get("preset")
        return Project(clean_name(entry["name"]), prompt if isinstance(prompt, str) else "",
                       preset if isinstance(preset, str) else "", tuple(files))

    def _member(self, zf: zipfile.ZipFile, name: str) -> Any:
        """The JSON of the zip's member ``name`` (read up to MAX_RECORD bytes)."""
        try:
            with zf.open(name) as f:
                data = f.read(MAX_RECORD + 1)
        except KeyError:
            raise fail(f"{name} is missing from the zip") from None
        except (zipfile.BadZipFile, NotImplementedError, EOFError) as e:
            raise fail(f"{name} cannot be read from the zip ({e})") from None
        self.done += len(data)
        if len(data) > MAX_RECORD:
            raise fail(f"{name} is larger than {MAX_RECORD >> 20} MB")
        try:
            return json.loads(data.decode("utf-8-sig"))
        except UnicodeDecodeError:
            raise fail(f"{name} is not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise fail(f"{name} is not valid JSON ({e.msg})") from None
        except RecursionError:
            raise fail(f"{name} is nested too deeply") from None

    def _open(self) -> IO[bytes]:
        if not stat.S_ISREG(os.stat(self.path).st_mode):  # a FIFO would block, a folder fail
            raise fail(f"{self.path.name} is not a regular file")
        if zipfile.is_zipfile(self.path):
            zf = zipfile.ZipFile(self.path)
            names = [i for i in zf.infolist() if Path(i.filename).name == "conversations.json"]
            if not names:
                zf.close()
                raise fail(f"{self.path.name} holds no conversations.json")
            info = min(names, key=lambda i: len(i.filename))  # the top-level one
            self.total = info.file_size
            return _Closing(zf.open(info), zf)
        self.total = self.path.stat().st_size
        return open(self.path, "rb")

    def _markdown(self, raw: IO[bytes]) -> Any:
        data = raw.read(MAX_MARKDOWN + 1)
        self.done = len(data)
        if len(data) > MAX_MARKDOWN:
            return fail(f"it is larger than {MAX_MARKDOWN >> 20} MB")
        try:
            return Markdown(data.decode("utf-8-sig"))
        except UnicodeDecodeError:
            return fail("it is not UTF-8 text")


class _Closing(io.BufferedReader):
    """A zip member that closes its archive with it."""

    def __init__(self, member: IO[bytes], archive: zipfile.ZipFile) -> None:
        super().__init__(member)  # type: ignore[arg-type]  # ZipExtFile is a RawIOBase in practice
        self._archive = archive

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._archive.close()


class _Stream:
    """The text of a byte stream, decoded as it is read, with a cursor."""

    def __init__(self, raw: IO[bytes], owner: Records) -> None:
        self.raw, self.owner = raw, owner
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")()
        self.buf, self.pos, self.eof = "", 0, False

    def more(self, at_least: int = CHUNK) -> bool:
        """Read about ``at_least`` more characters; False at the end of the stream."""
        if self.eof:
            return False
        data = self.raw.read(max(at_least, CHUNK))
        self.owner.done += len(data)
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            raise fail("it is not UTF-8 text") from None
        self.buf = self.buf[self.pos:] + text
        self.pos = 0
        self.eof = not data
        return True

    def skip_ws(self) -> str:
        """The next character that is not white space ('' at the end)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def value(self) -> Any:
        """The JSON value at the cursor; ImportFailure (the cursor unmoved) if it is invalid."""
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                truncated = e.pos >= len(self.buf) - 8 or e.msg.startswith("Unterminated")
                if not truncated or len(self.buf) - self.pos > MAX_RECORD:
                    raise fail(f"it is not valid JSON ({e.msg}, at character "
                               f"{e.pos - self.pos} of the record)") from None
                if not self.more(len(self.buf) - self.pos):
                    raise fail(f"it is not valid JSON: the file ends inside it ({e.msg})") from None
                continue
            except RecursionError:
                raise fail("it is nested too deeply") from None
            # a number or literal cut by the window's end would parse short: read on to be sure
            if end >= len(self.buf) and not self.eof and self.more():
                continue
            self.pos = end
            return obj

    def records(self) -> Iterator[tuple[int, Any]]:
        first = self.skip_ws()
        if first == "":
            raise fail("the file is empty")
        if first != "[":
            try:
                obj = self.value()
                if self.skip_ws():
                    raise fail("there is more after its JSON value")
            except ImportFailure as e:
                obj = e
            yield 0, obj
            return
        self.pos += 1
        i = 0
        if self.skip_ws() == "]":
            return
        while True:
            try:
                yield i, self.value()
            except ImportFailure as e:
                yield i, e
                return  # where the next record starts cannot be told
            i += 1
            c = self.skip_ws()
            if c == "]":
                return
            if c != ",":
                raise fail(f"the list of conversations is broken after record {i - 1}")
            self.pos += 1
            self.skip_ws()
