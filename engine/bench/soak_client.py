"""The soak's HTTP client (stdlib ``http.client``, loopback only): one request streamed or not,
a 429 surfaced with its ``Retry-After``, a stream dropped on purpose, the server's RSS."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

from engine.bench.soak_plan import CHAT, Reply


class Busy(Exception):
    """HTTP 429; ``retry_after`` in seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429, Retry-After {retry_after}")
        self.retry_after = retry_after


class Failed(Exception):
    """Anything but a complete, well-formed reply or the documented 429."""


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value or 1))
    except ValueError:
        raise Failed(f"429 with an unreadable Retry-After {value!r}") from None


def send(port: int, path: str, body: dict, *, abort_after: int | None = None,
         timeout: float = 600) -> Reply | None:
    """POST ``body``; the reply, or None when the stream was dropped on purpose after
    ``abort_after`` content chunks. Raises Busy on 429, Failed on anything else wrong."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status == 429:
            r.read()
            raise Busy(_retry_after(r.getheader("Retry-After")))
        if r.status != 200:
            raise Failed(f"{path}: HTTP {r.status}: {r.read()[:200]!r}")
        if not body.get("stream"):
            return _whole(path, json.loads(r.read()))
        return _stream(path, r, abort_after)
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise Failed(f"{path}: {type(e).__name__}: {e}") from None
    finally:
        conn.close()  # after a dropped stream, this is the disconnect the server must notice


def _whole(path: str, obj: dict) -> Reply:
    choice = obj["choices"][0]
    text = choice["message"]["content"] if path == CHAT else choice["text"]
    return Reply(text or "", choice.get("finish_reason"))


def _stream(path: str, r: http.client.HTTPResponse, abort_after: int | None) -> Reply | None:
    pieces: list[str] = []
    finish, done, n = None, False, 0
    for raw in r:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            break
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise Failed(f"{path}: error in the stream: {chunk['error']}")
        for choice in chunk.get("choices") or ():
            piece = (choice.get("delta") or {}).get("content") if path == CHAT else choice.get("text")
            if piece:
                pieces.append(piece)
                n += 1
            finish = choice.get("finish_reason") or finish
        if abort_after is not None and n >= abort_after:
            return None
    if not done:
        raise Failed(f"{path}: the stream ended without [DONE]")
    return Reply("".join(pieces), finish)


def health(port: int, timeout: float = 60) -> None:
    """GET /health: 200 and status ok, or Failed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        r = conn.getresponse()
        data = r.read()
        if r.status != 200 or json.loads(data).get("status") != "ok":
            raise Failed(f"/health: HTTP {r.status}: {data[:200]!r}")
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise Failed(f"/health: {type(e).__name__}: {e}") from None
    finally:
        conn.close()


def rss_bytes(pid: int) -> int | None:
    """Resident memory of process ``pid`` (psutil when installed, else /proc); None if gone."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None
