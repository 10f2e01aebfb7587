"""Small local JSON files (settings, caches, lists): read forgivingly, written atomically.

``read_json`` never raises for a damaged file: a file that is not UTF-8, not JSON, nested too
deeply, too large or (per the caller's ``check``) of the wrong shape is moved aside to
``<name>.bad`` (the last damaged copy is kept for the user to look at) with a logged warning,
and None is returned so the caller uses its defaults. ``write_json`` writes through a unique
temporary file in the same folder (``tempfile.mkstemp``), fsyncs it and renames it over the
target, so two processes never share a temporary name and a reader sees the old file or the new.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32


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


def write_json(path: Path, obj: Any, *, indent: int | None = None) -> None:
    """Write ``obj`` as JSON atomically through a unique temporary file. Raises OSError,
    ValueError (a value JSON cannot hold, NaN included)."""
    path = Path(path)
    text = json.dumps(obj, indent=indent, sort_keys=indent is not None, allow_nan=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
