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

import logging
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import client
from bench.process import free_port, start_server
from engine.errors import DuetError

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


def ngl(gpu_layers: int) -> str:
    """llama-server's -ngl for Duet's ``--gpu-layers``: a negative count is "all" (its own -1
    means "auto", fit to memory)."""
    return "all" if gpu_layers < 0 else str(gpu_layers)


@contextmanager
def llama_server(binary: Path, target: Path, mode: str, *, threads: int, ctx: int = 4096,
                 draft: Path | str = "") -> Iterator[int]:
    """A llama-server in ``mode`` (one of ``SERVER_MODES``) on a free loopback port, ready for
    requests; yields the port and stops the server on exit."""
    port = free_port()
    cmd = [str(binary), "-m", str(target), "-t", str(threads), "-c", str(ctx), "-np", "1",
           "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
    cmd += [a.format(draft=draft, threads=threads) for a in SERVER_MODES[mode]]
    with start_server(cmd, port, "llama-server", timeout_s=180):
        yield port


def _chat(port: int, turns: Sequence[str], max_tokens: int) -> client.HttpReply:
    """One conversation: each turn's reply goes into the next turn's history (with the server's
    prompt cache on, as a chat client would); the last turn's reply is returned."""
    messages: list[dict[str, Any]] = []
    for text in turns:
        messages.append({"role": "user", "content": text})
        r = client.post(port, "/v1/chat/completions",
                        {"messages": messages, "temperature": 0, "max_tokens": max_tokens,
                         "cache_prompt": len(turns) > 1})
        messages.append({"role": "assistant", "content": r.text})
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
            runs: list[dict[str, Any]] = []
            for _ in range(repeats):
                with llama_server(binary, target, mode, threads=threads, draft=draft) as port:
                    _chat(port, (WARM_UP,), 8)
                    r = _chat(port, turns, max_tokens)
                t = r.timings
                n_draft, n_acc = t.get("draft_n", 0), t.get("draft_n_accepted", 0)
                runs.append({"tokens_per_s": float(t.get("predicted_per_second", 0.0)),
                             "n_tokens": int(t.get("predicted_n", 0)),
                             "acceptance": n_acc / n_draft if n_draft else None,
                             "text": r.text})
            out[mode] = runs
            log.info("%s: %.1f tok/s", mode, statistics.median(float(x["tokens_per_s"]) for x in runs))
        except (DuetError, OSError, ValueError) as e:
            log.warning("%s failed: %s", mode, e)
    return out

