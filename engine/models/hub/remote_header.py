"""Read a GGUF header without the file: HTTP range requests for the first MB, more while needed.

A header holds the metadata and the tensor table: a few KB for most keys, but the vocabulary
(tokens, merges, scores) makes it 1-12 MB (Qwen2.5: 5.9 MB, Gemma 3: 6.5 MB, SmolLM2: 1.6 MB).
We read ``FIRST_READ`` bytes (one request covers most models), and when the parser says the header
goes on we fetch the rest in growing steps, never past ``MAX_HEADER`` bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from huggingface_hub.utils import hf_raise_for_status

from engine.models.hub import client
from engine.models.hub.errors import HubError, describe
from engine.models.hub.gguf_header import GGUFError, GGUFHeader, NeedMoreBytes, parse_header

log = logging.getLogger(__name__)

FIRST_READ = 8 << 20
MAX_HEADER = 64 << 20

Fetch = Callable[[int, int], bytes]  # (start, stop) -> the bytes in [start, stop), fewer at end of file


def read_header(fetch: Fetch, what: str, *, first: int = FIRST_READ, limit: int = MAX_HEADER) -> GGUFHeader:
    """Parse the header of the file that ``fetch`` reads. Raises HubError (one line)."""
    buf = bytearray()
    want = first
    while True:
        chunk = fetch(len(buf), want)
        buf += chunk
        try:
            return parse_header(bytes(buf))
        except NeedMoreBytes as e:
            if len(buf) < want:  # the file ended
                raise HubError(f"{what}: the file ends inside its GGUF header (truncated?)") from None
            if want >= limit:
                raise HubError(f"{what}: the GGUF header is larger than {limit >> 20} MB; not read") from None
            want = min(limit, max(e.at_least, 2 * want))
        except GGUFError as e:
            raise HubError(f"{what}: {e}") from None


def remote_header(repo: str, filename: str, revision: str = client.DEFAULT_REVISION,
                  **kw: int) -> GGUFHeader:
    """The GGUF header of ``repo``/``filename`` on the Hub, read by range requests."""
    url = client.file_url(repo, filename, revision)
    what = f"{repo}: {filename}"
    session = client.session()

    def fetch(start: int, stop: int) -> bytes:
        headers = {**client.headers(), "Range": f"bytes={start}-{stop - 1}"}
        try:
            with session.stream("GET", url, headers=headers, follow_redirects=True,
                                timeout=client.TIMEOUT) as r:
                if r.status_code >= 400:
                    r.read()
                    hf_raise_for_status(r)
                out = bytearray()
                skip = start if r.status_code == 200 else 0  # the server ignored the range
                for piece in r.iter_bytes(1 << 16):
                    out += piece
                    if len(out) >= skip + (stop - start):
                        break
                return bytes(out[skip: skip + stop - start])
        except HubError:
            raise
        except Exception as e:  # HTTP status or network errors from huggingface_hub's client
            raise HubError(describe(e, what)) from e

    log.debug("reading the GGUF header of %s", what)
    return read_header(fetch, what, **kw)


def local_header(path: Path, **kw: int) -> GGUFHeader:
    """The GGUF header of a file on disk (same bounds as the remote read)."""
    try:
        with open(path, "rb") as f:
            def fetch(start: int, stop: int) -> bytes:
                f.seek(start)
                return f.read(stop - start)

            return read_header(fetch, path.name, **kw)
    except OSError as e:
        raise HubError(f"cannot read {path}: {e.strerror or e}") from e
