"""llama.cpp's own ``llama-server`` as a peer, measured as shared/peers.md describes.

Each timed request runs on a freshly started server after one warm-up request of another,
fixed prompt (``WARM_UP``), so that no drafter has seen the timed reply: ``ngram-mod`` keeps its
n-gram table across requests (shared by every slot, cleared only when it fills), and a warm-up
with the timed prompt itself let it draft the timed reply from memory (measured on the 1.5B,
128 tokens: the open chat prompt 13.6 tok/s with nothing drafted on first sight, 17.4 tok/s
with 47 of 64 drafts accepted when sent again). It reads ``timings.predicted_per_second``
(generation only) and the draft counts, and stops the server. Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import json
import logging
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

WARM_UP = "Say hello in one word."  # loads the weights and threads; shares nothing with a timed prompt

SERVER_MODES = {
    "server-plain": ["--spec-type", "none"],
    "server-ngram-simple": ["--spec-type", "ngram-simple"],
    "server-ngram-mod": ["--spec-type", "ngram-mod"],
    "server-ngram-map-k": ["--spec-type", "ngram-map-k"],
    "server-draft": ["-md", "{draft}", "--spec-type", "draft-simple", "--spec-draft-p-min", "0.75", "-td", "{threads}"],
}
NGRAM_MODES = ("server-ngram-simple", "server-ngram-mod", "server-ngram-map-k")


@contextmanager
def llama_server(binary: Path, target: Path, mode: str, *, threads: int, ctx: int = 4096,
                 draft: Path | str = "") -> Iterator[int]:
    """A llama-server in ``mode`` (one of ``SERVER_MODES``) on a free loopback port, ready for
    requests; yields the port and stops the server on exit."""
    port = _free_port()
    cmd = [str(binary), "-m", str(target), "-t", str(threads), "-c", str(ctx), "-np", "1",
           "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
    cmd += [a.format(draft=draft, threads=threads) for a in SERVER_MODES[mode]]
    proc = launch(cmd)
    try:
        _wait_ready(port, proc)
        yield port
    finally:
        stop(proc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port: int, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"HTTP {e.code}: {e.read()[:300]!r}") from None


def launch(cmd: list[str]) -> subprocess.Popen:
    """Start a server with its output in a temporary file, so that a failure can say why."""
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    proc.output_file = out  # type: ignore[attr-defined]
    return proc


def output_tail(proc: subprocess.Popen, n: int = 600) -> str:
    """The last ``n`` characters the server printed (on one line)."""
    out = getattr(proc, "output_file", None)
    if out is None or out.closed:
        return ""
    out.flush()
    out.seek(0, 2)
    out.seek(max(0, out.tell() - n))
    return " | ".join(out.read().decode("utf-8", "replace").strip().splitlines())


def _wait_ready(port: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}: {output_tail(proc)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("llama-server did not become ready")


def _chat(port: int, turns: Sequence[str], max_tokens: int) -> dict:
    """One conversation: each turn's reply goes into the next turn's history (with the server's
    prompt cache on, as a chat client would); the last turn's response is returned."""
    messages: list[dict] = []
    for text in turns:
        messages.append({"role": "user", "content": text})
        r = _post(port, {"messages": messages, "temperature": 0, "max_tokens": max_tokens,
                         "cache_prompt": len(turns) > 1})
        messages.append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
    return r


def run_server_modes(binary: Path, target: Path, draft: Path, prompt: str | Sequence[str],
                     max_tokens: int, threads: int, repeats: int,
                     modes: Sequence[str] = ()) -> dict[str, list[dict]]:
    """Each server mode (``modes``, default all) on ``prompt`` (a message, or the user turns of
    a conversation whose last reply is timed), each repeat on a fresh server."""
    turns = (prompt,) if isinstance(prompt, str) else tuple(prompt)
    out: dict[str, list[dict]] = {}
    for mode in SERVER_MODES:
        if modes and mode not in modes:
            continue
        try:
            runs = []
            for _ in range(repeats):
                with llama_server(binary, target, mode, threads=threads, draft=draft) as port:
                    _chat(port, (WARM_UP,), 8)
                    r = _chat(port, turns, max_tokens)
                t = r.get("timings", {})
                n_draft, n_acc = t.get("draft_n", 0), t.get("draft_n_accepted", 0)
                runs.append({"tokens_per_s": float(t.get("predicted_per_second", 0.0)),
                             "n_tokens": int(t.get("predicted_n", 0)),
                             "acceptance": n_acc / n_draft if n_draft else None,
                             "text": r["choices"][0]["message"]["content"]})
            out[mode] = runs
            log.info("%s: %.1f tok/s", mode, statistics.median(x["tokens_per_s"] for x in runs))
        except (OSError, RuntimeError, ValueError, KeyError) as e:
            log.warning("%s failed: %s", mode, e)
    return out


def stop(proc: subprocess.Popen) -> None:
    """End a server process: politely, then for good after 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    out = getattr(proc, "output_file", None)
    if out is not None:
        out.close()
