"""Small local files: JSON read forgivingly, every file written atomically.

``read_json`` never raises for a damaged file: a file that is not UTF-8, not JSON, nested too
deeply, too large or (per the caller's ``check``) of the wrong shape is moved aside to
``<name>.bad`` (the last damaged copy is kept for the user to look at) with a logged warning,
and None is returned so the caller uses its defaults.

``atomic_write`` is the one way Duet replaces a file (``write_bytes`` and ``write_json`` are
built on it): the content goes to a unique temporary sibling ``<name>.tmp-<random>``, which
takes the permission bits of the file it replaces and is renamed over it, so a reader sees the
old file or the new, two processes never share a temporary, and a failed write leaves the old
file and no temporary behind. A new file is private (0600: settings hold API keys, tool
configurations hold tokens) unless the caller says it is a document (``private=False``: the
usual 0666 less the umask). ``durable`` writes (the default) also fsync the data and the
folder, so the new file survives a crash; caches that can be rebuilt skip that. Temporaries a
crash did leave are removed by a later write of the same file once they are ``STALE_S`` old.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32
TEMP_MARK = ".tmp-"  # the temporary of a write to NAME is NAME.tmp-<random>
STALE_S = 600.0  # a temporary this old is left from a crash, not a write under way


class Damaged(ValueError):
    """A local file that cannot be used as it is."""


def _depth_ok(obj: Any, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return False
    if isinstance(obj, dict):
        return all(_depth_ok(v, depth + 1) for v in obj.values())
    if isinstance(obj, list):
        return all(_depth_ok(v, depth + 1) for v in obj)
    return True


def _reject_constant(name: str) -> Any:
    raise Damaged(f"it holds {name}, which is not a number JSON allows")


def decode(raw: bytes) -> Any:
    """Parse ``raw`` as strict JSON (UTF-8, no NaN/Infinity, bounded size and depth); Damaged."""
    if len(raw) > MAX_BYTES:
        raise Damaged(f"it is too large ({len(raw):,} bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Damaged("it is not UTF-8 text") from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise Damaged("it is nested too deeply") from None
    except ValueError as e:
        raise Damaged(f"it is not valid JSON ({e})"[:200]) from None
    if not _depth_ok(obj):
        raise Damaged("it is nested too deeply")
    return obj


def set_aside(path: Path, why: str) -> None:
    """Move a damaged ``path`` to ``<name>.bad`` (replacing an older one) and log why."""
    bad = path.with_name(path.name + ".bad")
    try:
        os.replace(path, bad)
        log.warning("%s is damaged (%s); using the defaults, the file was kept as %s",
                    path, why, bad.name)
    except OSError as e:
        log.warning("%s is damaged (%s); using the defaults (could not move it aside: %s)",
                    path, why, e.strerror or e)


def read_json(path: Path, check: Callable[[Any], None] | None = None) -> Any | None:
    """The JSON value in ``path``; None when it is missing, unreadable or damaged (then set
    aside). ``check`` may raise ValueError for a value of the wrong shape."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():
            log.warning("%s is not a regular file; using the defaults", path)
            return None
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("cannot read %s (%s); using the defaults", path, e.strerror or e)
        return None
    try:
        obj = decode(raw)
        if check is not None:
            check(obj)
    except ValueError as e:  # Damaged included
        set_aside(path, str(e))
        return None
    return obj


@contextlib.contextmanager
def atomic_write(path: Path, *, durable: bool = True, private: bool = True
                 ) -> Iterator[IO[bytes]]:
    """A binary file whose content replaces ``path`` when the block ends; if the block raises,
    ``path`` is left as it was (see the module docstring). Raises OSError."""
    path = Path(path)
    mode = _mode_for(path, private)
    _remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + TEMP_MARK)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), mode)
            if durable:
                os.fsync(f.fileno())
        if not hasattr(os, "fchmod"):
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def write_bytes(path: Path, data: bytes, *, durable: bool = True, private: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (atomic_write), making its folder if needed.
    Raises OSError."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, durable=durable, private=private) as f:
        f.write(data)


def write_json(path: Path, obj: Any, *, indent: int | None = None, sort_keys: bool = False,
               durable: bool = True) -> None:
    """Replace ``path`` with ``obj`` as JSON atomically (atomic_write). Raises OSError,
    ValueError (a value JSON cannot hold, NaN included) before anything is written."""
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, allow_nan=False)
    write_bytes(path, text.encode("utf-8"), durable=durable)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` survive a crash (where the system allows it)."""
    if os.name == "nt":  # folders cannot be opened for fsync there; NTFS journals renames
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        log.debug("could not fsync %s: %s", folder, e)


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _mode_for(path: Path, private: bool) -> int:
    """The permission bits a write gives ``path``: those of the file it replaces, else 0600 for a
    private file and the usual ones for a document (0666 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o600 if private else 0o666 & ~_umask()


def _remove_stale_temps(path: Path) -> None:
    """Remove the temporaries that interrupted writes of ``path`` left (older than STALE_S, so
    that a write under way in another process is left alone)."""
    now = time.time()
    try:
        candidates = list(path.parent.glob(glob.escape(path.name) + TEMP_MARK + "*"))
    except OSError:
        return
    for old in candidates:
        with contextlib.suppress(OSError):
            st = os.lstat(old)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_S:
                old.unlink()
                log.info("removed %s, left by an interrupted write", old.name)
