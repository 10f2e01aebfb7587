"""Download a GGUF (or every part of a split one) from the Hub: resumable, cancellable, verified.

Why not ``huggingface_hub.hf_hub_download``: it resumes and shows tqdm bars, but it writes into its
own cache (blobs and symlinks) rather than Duet's models folder, cannot be cancelled except by
killing the thread, reports progress only through tqdm, and checks the size but not the SHA-256.
So we take its pieces instead: ``HfApi.model_info(files_metadata=True)`` for sizes and LFS SHA-256,
``get_hf_file_metadata`` for the ETag and the final location, and its configured HTTP session for
a streamed ``Range`` GET.

Files go to ``<models>/<publisher>/<repo>/<path in the repository>`` (engine.models.folder), so
two repositories' files of one name never meet. A file already there counts as downloaded only
when its SHA-256 is the Hub's; any other file there is the person's and is never replaced (the
download stops and says so).

On disk, beside the final name: ``NAME.part`` (the bytes so far) and ``NAME.part.json`` (the ETag,
size and SHA-256 they belong to). A restart resumes from the ``.part`` size with ``Range`` and
``If-Range: ETag``; a different ETag (the file changed upstream) starts again from zero. Bytes are
hashed as they arrive (a resume first hashes what is on disk); only a ``.part`` whose SHA-256
matches is renamed to the final name (atomic, same folder), so a half or corrupt file never
appears under the final name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import get_hf_file_metadata
from huggingface_hub.utils import hf_raise_for_status

from engine.models.folder import hub_path
from engine.models.hub import client
from engine.models.hub.errors import DownloadCancelled, HubError, describe, is_network_error
from engine.models.hub.files import GGUFEntry, RemoteFile

log = logging.getLogger(__name__)

CHUNK = 1 << 20
DISK_MARGIN = 64 << 20  # keep this much free beyond the file itself


@dataclass(frozen=True)
class DownloadProgress:
    """One progress step. ``stage``: "download", "verify", "done". Bytes count the whole entry."""

    stage: str
    file: str
    done_bytes: int
    total_bytes: int
    bytes_per_s: float
    part_index: int = 1
    n_parts: int = 1

    @property
    def eta_s(self) -> float | None:
        if self.bytes_per_s <= 0:
            return None
        return max(self.total_bytes - self.done_bytes, 0) / self.bytes_per_s


Progress = Callable[[DownloadProgress], None]


@dataclass(frozen=True)
class DownloadOptions:
    retries: int = 2  # automatic resumes after a dropped connection
    retry_wait_s: float = 2.0


def part_path(final: Path) -> Path:
    return final.with_name(final.name + ".part")


def _meta_path(final: Path) -> Path:
    return final.with_name(final.name + ".part.json")


def download_entry(repo: str, entry: GGUFEntry, models: Path, *,
                   revision: str = client.DEFAULT_REVISION, progress: Progress | None = None,
                   cancel: threading.Event | None = None,
                   options: DownloadOptions = DownloadOptions()) -> Path:
    """Download every file of ``entry`` (its projector too) into ``models/<repo>/``; returns the
    path to load (the first part).

    Raises HubError (one line), or DownloadCancelled when ``cancel`` is set (partial files kept)."""
    files = entry.all_files  # a vision model's projector too, beside it
    try:
        finals = [hub_path(models, repo, f.path) for f in files]
    except ValueError as e:
        raise HubError(str(e)) from None
    models.mkdir(parents=True, exist_ok=True)
    _check_disk(files, finals, models)
    for final in finals:
        final.parent.mkdir(parents=True, exist_ok=True)
    cancel = cancel or threading.Event()
    meter = _Meter(progress, entry.size or 0, len(files))
    for i, (f, final) in enumerate(zip(files, finals), start=1):
        meter.begin_part(i, f.path)
        _download_file(repo, f, final, revision, meter, cancel, options)
    meter.emit("done", force=True)
    return finals[0]


def _check_disk(files: tuple[RemoteFile, ...], finals: list[Path], models: Path) -> None:
    need = 0
    for f, final in zip(files, finals):
        if f.size is None or final.exists():
            continue
        part = part_path(final)
        need += f.size - (part.stat().st_size if part.exists() else 0)
    free = shutil.disk_usage(models).free
    if need > 0 and need + DISK_MARGIN > free:
        raise HubError(f"not enough disk space in {models}: {_gb(need)} needed, {_gb(free)} free")


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _download_file(repo: str, f: RemoteFile, final: Path, revision: str, meter: _Meter,
                   cancel: threading.Event, options: DownloadOptions) -> None:
    what = f"{repo}: {f.path}"
    try:
        meta = get_hf_file_metadata(client.file_url(repo, f.path, revision), token=client.token(),
                                    timeout=client.TIMEOUT, endpoint=client.endpoint())
    except Exception as e:
        raise HubError(describe(e, what)) from e
    size = f.size if f.size is not None else meta.size
    sha256 = (f.sha256 or _sha_from_etag(meta.etag) or "").lower()
    if size is None or not sha256:
        raise HubError(f"{what}: the Hub gave no size or SHA-256 for it; not downloaded")
    if final.exists():
        _check_present(final, size, sha256, meter, cancel, what)
        return
    etag = meta.etag or sha256
    part, meta_file = part_path(final), _meta_path(final)
    _forget_stale_part(part, meta_file, {"etag": etag, "size": size, "sha256": sha256})
    hasher = _PartHasher(part, cancel, what)
    attempt = 0
    while True:
        try:
            _stream_into(meta.location, part, size, etag, meter, cancel, what, hasher)
            break
        except HubError as e:
            network = isinstance(e.__cause__, Exception) and is_network_error(e.__cause__)
            if not network or attempt >= options.retries or cancel.is_set():
                raise
            attempt += 1
            log.warning("%s; resuming (attempt %d of %d)", e, attempt, options.retries)
            if cancel.wait(options.retry_wait_s):
                raise DownloadCancelled(f"{what}: cancelled; {_gb(part.stat().st_size)} kept to resume") from None
    meter.emit("verify", force=True)
    hasher.sync(size)  # a no-op unless the bytes on disk were not all hashed on the way in
    digest = hasher.hexdigest()
    if digest != sha256:
        part.unlink(missing_ok=True)
        meta_file.unlink(missing_ok=True)
        raise HubError(f"{what}: SHA-256 mismatch (got {digest[:12]}…, the Hub says {sha256[:12]}…); "
                       "the download was deleted")
    if final.exists():  # put there while the bytes were coming
        raise HubError(f"{what}: {_not_ours(final)}; the download is kept as {part.name}")
    os.replace(part, final)
    meta_file.unlink(missing_ok=True)
    log.info("downloaded %s to %s", what, final)


def _check_present(final: Path, size: int, sha256: str, meter: _Meter, cancel: threading.Event,
                   what: str) -> None:
    """Count ``final`` as downloaded when it holds the Hub's bytes; HubError otherwise (the
    file is left as it is)."""
    if final.is_file() and final.stat().st_size == size:
        meter.emit("verify", force=True)
        hasher = _PartHasher(final, cancel, what)
        hasher.sync(size)
        if hasher.hexdigest() == sha256:
            log.info("%s is already in %s", what, final.parent)
            meter.add(size)
            return
    raise HubError(f"{what}: {_not_ours(final)}")


def _not_ours(final: Path) -> str:
    return (f"{final} is not the Hub's file (its SHA-256 differs) and was left as it is; "
            "move or rename it to download this one")


def _sha_from_etag(etag: str | None) -> str | None:
    """LFS files' ETag (X-Linked-Etag) is their SHA-256."""
    if etag and len(etag) == 64 and all(c in "0123456789abcdefABCDEF" for c in etag):
        return etag
    return None


def _forget_stale_part(part: Path, meta_file: Path, meta: dict) -> None:
    """Keep ``part`` only if it belongs to the same remote file (same ETag, size, SHA-256)."""
    try:
        old = json.loads(meta_file.read_text()) if meta_file.exists() else None
    except (OSError, ValueError):
        old = None
    if part.exists() and (old != meta or part.stat().st_size > meta["size"]):
        log.info("discarding %s: it belongs to another version of the file", part.name)
        part.unlink()
    meta_file.write_text(json.dumps(meta))


def _stream_into(url: str, part: Path, size: int, etag: str, meter: _Meter, cancel: threading.Event,
                 what: str, hasher: _PartHasher) -> None:
    """Append the bytes from ``part``'s size to ``size`` to ``part``, hashing them on the way."""
    have = part.stat().st_size if part.exists() else 0
    meter.resume_at(have)
    if have == size:
        return
    hasher.sync(have)
    headers = client.headers()
    if have:
        headers.update({"Range": f"bytes={have}-", "If-Range": f'"{etag}"'})
    try:
        with client.session().stream("GET", url, headers=headers, follow_redirects=True,
                                     timeout=client.TIMEOUT) as r:
            if r.status_code >= 400:
                r.read()
                hf_raise_for_status(r)
            if have and r.status_code == 200:  # the server sent the whole file: start over
                log.info("%s: the server ignored the range; starting from zero", what)
                have = 0
                meter.resume_at(0)
                hasher.sync(0)
            with open(part, "r+b" if have else "wb") as out:
                out.seek(have)
                out.truncate()
                for piece in r.iter_bytes():  # as received: a dropped connection loses nothing
                    if cancel.is_set():
                        raise DownloadCancelled(f"{what}: cancelled; {_gb(out.tell())} kept to resume")
                    if out.tell() + len(piece) > size:
                        raise HubError(f"{what}: the server sent more than the {size} bytes expected")
                    out.write(piece)
                    out.flush()  # on disk as received: a killed process resumes from all of it
                    hasher.update(piece)
                    meter.add(len(piece))
                out.flush()
                os.fsync(out.fileno())
                got = out.tell()
    except HubError:
        raise
    except Exception as e:
        if isinstance(e, OSError) and not is_network_error(e):
            raise HubError(f"{what}: cannot write {part}: {e.strerror or e}") from e
        got = part.stat().st_size if part.exists() else 0
        if got > have and is_network_error(e):
            raise HubError(f"{what}: the connection dropped after {_gb(got)} of {_gb(size)}; "
                           "download again to resume") from e
        raise HubError(describe(e, what)) from e
    if got != size:
        raise HubError(f"{what}: the connection ended after {_gb(got)} of {_gb(size)}; "
                       "download again to resume") from ConnectionError()


class _PartHasher:
    """SHA-256 of ``part`` kept up to date as bytes are appended, so the end needs no second read.

    ``sync(n)`` makes it cover exactly the first ``n`` bytes on disk (re-reading them when it
    covers something else: a resume after a restart, or a restart from zero)."""

    def __init__(self, part: Path, cancel: threading.Event, what: str) -> None:
        self._part, self._cancel, self._what = part, cancel, what
        self._h = hashlib.sha256()
        self._n = 0

    def sync(self, n: int) -> None:
        if self._n == n:
            return
        self._h, self._n = hashlib.sha256(), 0
        with open(self._part, "rb") as f:
            while self._n < n:
                block = f.read(min(CHUNK * 4, n - self._n))
                if not block:
                    raise HubError(f"{self._what}: the partial download shrank while being read")
                if self._cancel.is_set():
                    raise DownloadCancelled(f"{self._what}: cancelled; the partial download is kept")
                self.update(block)

    def update(self, data: bytes) -> None:
        self._h.update(data)
        self._n += len(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


class _Meter:
    """Turns byte counts into DownloadProgress events (at most ~10 a second, plus stage changes)."""

    def __init__(self, progress: Progress | None, total: int, n_parts: int) -> None:
        self._progress = progress
        self._total = total
        self._n_parts = n_parts
        self._base = 0  # bytes of the finished parts
        self._done = 0  # bytes of the current part on disk
        self._part = (1, "")
        self._start_t = time.monotonic()
        self._start_bytes = 0
        self._last_t = 0.0

    def begin_part(self, index: int, name: str) -> None:
        self._base += self._done
        self._done = 0
        self._part = (index, name)

    def resume_at(self, have: int) -> None:
        self._done = have
        self._start_t, self._start_bytes = time.monotonic(), self._base + have

    def add(self, n: int) -> None:
        self._done += n
        self.emit("download")

    def emit(self, stage: str, force: bool = False) -> None:
        if self._progress is None:
            return
        now = time.monotonic()
        if not force and now - self._last_t < 0.1:
            return
        self._last_t = now
        done = self._base + self._done
        elapsed = now - self._start_t
        speed = (done - self._start_bytes) / elapsed if elapsed > 0 else 0.0
        self._progress(DownloadProgress(stage, self._part[1], done, self._total, speed,
                                        self._part[0], self._n_parts))
