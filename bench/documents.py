"""``python -m bench documents``: what a file read once saves, and embeddings against llama-server.

* **document**: a ~3,000-token document (the language reference's topics, read from this
  interpreter: bench.stdlib_text), attached whole to a question. Time to the first token
  cold (nothing cached, an empty disk KV store), then with another question in a new
  conversation of the same process, then after a restart (a new runtime over the same store:
  nothing in memory, the prompt's state on disk). Target: after a restart <= 1/8 of cold.
* **agent**: ``duet-cli serve`` with an agent's ~2,000-token system prompt and tool list; the
  first token of a request cold, then of a request with another user message after the server
  was stopped and started again. Target: <= 1/5 of cold.
* **pdf**: a 300-page PDF (the reference's prose, each page with one code word of its own, written
  with fpdf2), attached to a question about one page, against a plain question with no file:
  first token of each in a new conversation, BM25 alone and with the catalog's embedding model
  (when installed), and whether the answer names that page's code word. Target: <= 2x.
* **embeddings** (with ``--llama-server PATH``): texts per second through ``/v1/embeddings``,
  batches of 16, Duet's ``serve --embedding-model`` against ``llama-server --embeddings`` on
  the same GGUF, in turns in one run. Target: >= 1.0x.

Medians over ``--repeats``; every run starts from an empty store of its own. Prints a table and
writes ``OUT/documents.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import client
from bench.process import empty_kv_store, free_port, start_server
from bench.stdlib_text import passage, topic_keys
from engine.chat.messages import Attachment, Message
from engine.decode.sampling import SamplingParams
from engine.documents.embeddings import EmbeddingSource
from engine.documents.extract import read_document
from engine.errors import DuetError
from engine.events import Token
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.prompts.attachments import attachment
from engine.prompts.request import Chat, Policy, prepare
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model

log = logging.getLogger(__name__)

TARGETS = {"restart_ratio": 1 / 8, "agent_ratio": 1 / 5, "pdf_ratio": 2.0, "embeddings_ratio": 1.0}
PDF_PAGES = 300
PDF_QUESTION_PAGES = (42, 137, 256)
PLAIN_QUESTION = "What is a good way to learn a new programming language? Answer briefly."
EMBED_BATCH = 16


def add_parser(bench_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = bench_subparsers.add_parser("documents", help="a document read once; embeddings")
    p.add_argument("--model", default="target", help="GGUF path or starter key (default: target)")
    p.add_argument("--embedding-model", default="embed", help="GGUF for the embeddings part")
    p.add_argument("--doc-tokens", type=int, default=3000, help="the document's length")
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: one per core)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--parts", default="document,agent,pdf,embeddings")
    p.add_argument("--llama-server", type=Path, default=None, help="llama-server binary (embeddings)")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)
    return p


def document_text(model: Any, n_tokens: int) -> str:
    """Real prose of about ``n_tokens`` tokens: the language reference's topics, in order."""
    parts: list[str] = []
    total = 0
    for p in passages():
        parts.append(f"## {p.title}\n\n{p.text}\n")
        total += len(model.tokenize_text(parts[-1]))
        if total >= n_tokens:
            break
    return "\n".join(parts)


def passages() -> list[Any]:
    """The language reference's topics of 1,500 characters or more, in sorted order."""

    return [passage(k, 4000) for k in topic_keys(1500)]


def _ttft(gen: Any, messages: list[Any], params: Any) -> float:

    t0 = time.perf_counter()
    first = None
    for ev in gen.chat(messages, params):
        if first is None and isinstance(ev, Token):
            first = time.perf_counter() - t0
    return first if first is not None else time.perf_counter() - t0


def document_run(args: argparse.Namespace) -> dict[str, float]:
    """One run of the document part: cold, new conversation, after a restart (seconds)."""

    params = SamplingParams(temperature=0, max_tokens=4)
    config = RuntimeConfig(target=ModelSpec(resolve_model(args.model)),
                           context=ContextParams(n_ctx=args.ctx, n_threads=args.threads))

    def ask(rt: Runtime, text: str, doc: str) -> float:
        file = Attachment("reference.md", "markdown", "0" * 64, doc, (), "whole")
        return _ttft(rt.generator, [Message("user", text, attachments=(file,))], params)

    out: dict[str, float] = {}
    with Runtime(config) as rt:
        doc = document_text(rt.target, args.doc_tokens)
        out["doc_tokens"] = len(rt.target.tokenize_text(doc))
        out["cold_s"] = ask(rt, "What does the first section say, in one sentence?", doc)
        rt.ctx.clear()  # a new conversation in another sequence of the app: the memory cache
        out["new_conversation_s"] = ask(rt, "Name one keyword the document explains.", doc)
        if rt.cache.disk is not None:
            rt.cache.disk.flush()
    with Runtime(config) as rt:  # a restart: nothing in memory
        out["restart_s"] = ask(rt, "Which section is the longest?", doc)
    return out


def write_pdf(path: Path, pages: int) -> Path:
    """A PDF of ``pages`` pages of the reference's prose, page n saying its code word."""
    # lazy: fpdf2 writes the benchmark's PDF only (the bench extra)
    from fpdf import FPDF

    texts = [p.text for p in passages()]
    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for n in range(1, pages + 1):
        pdf.add_page()
        body = texts[n % len(texts)][:1200] + f"\n\nThe code word on page {n} is ZEBRA-{n}.\n\n" \
            + texts[(n * 7) % len(texts)][:1200]
        pdf.multi_cell(0, 5, body.encode("latin-1", "replace").decode("latin-1"))
    pdf.output(str(path))
    return path


def pdf_run(args: argparse.Namespace) -> dict[str, float]:
    """One run of the pdf part (seconds; ``*_right``: the share of answers naming the code)."""
    params = SamplingParams(temperature=0, max_tokens=24)
    # no state kept between questions (memory or disk): each is read cold, whatever it shares
    config = RuntimeConfig(target=ModelSpec(resolve_model(args.model)),
                           context=ContextParams(n_ctx=args.ctx, n_threads=args.threads),
                           state_cache_bytes=0, kv_store_bytes=0)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder, Runtime(config) as rt:
        pdf = write_pdf(Path(folder) / "manual.pdf", PDF_PAGES)
        t0 = time.perf_counter()
        doc = read_document(pdf)  # once, when the file is attached
        out["pdf_read_s"] = time.perf_counter() - t0
        vectors: EmbeddingSource | None = None
        try:
            source = EmbeddingSource(rt.target, resolve_model(args.embedding_model))
            source.embed(["loaded before the questions"])  # as in the window after the first
            vectors = source
        except DuetError:
            pass  # no embedding model installed: BM25 alone, as in the window

        def ask(text: str, files: tuple[Attachment, ...], embed: Any) -> tuple[float, float, str, int]:
            rt.ctx.clear()  # a new conversation
            t0 = time.perf_counter()
            turn = prepare(rt.target, Chat((Message("user", text, attachments=files),), params,
                                           embed=embed), Policy(rt.ctx.n_ctx))
            prepared = time.perf_counter() - t0
            first, reply = None, ""
            for ev in rt.generator.complete(turn.prompt, params):
                if isinstance(ev, Token):
                    first = first or time.perf_counter() - t0
                    reply += ev.text
            return first or time.perf_counter() - t0, prepared, reply, len(turn.prompt)

        plain = [ask(PLAIN_QUESTION, (), None) for _ in range(2)]
        out["plain_s"] = statistics.median(r[0] for r in plain)
        out["plain_prompt_tokens"] = plain[0][3]
        for label, embed in (("bm25", None), ("embed", vectors.embed if vectors else None)):
            if label == "embed" and embed is None:
                continue
            runs = [ask(f"What is the code word on page {n}?", (attachment(doc),), embed)
                    for n in PDF_QUESTION_PAGES]
            out[f"{label}_s"] = statistics.median(r[0] for r in runs)
            out[f"{label}_retrieve_s"] = statistics.median(r[1] for r in runs)
            out[f"{label}_prompt_tokens"] = statistics.median(r[3] for r in runs)
            out[f"{label}_right"] = sum(f"ZEBRA-{n}" in r[2] for n, r in
                                        zip(PDF_QUESTION_PAGES, runs)) / len(runs)
        if vectors is not None:
            vectors.close()
    return out


AGENT_TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": f"Tool number {i}: " + "it looks things up in a catalogue "
    "of parts, and returns the matching rows as JSON with their prices and stock. " * 3,
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "what to look for"},
        "limit": {"type": "integer", "description": "how many rows at most"}},
        "required": ["query"]}}} for i in range(12)]


def agent_run(args: argparse.Namespace, system: str) -> dict[str, float]:
    """The agent part: one cold request, then one with another user message after a restart."""

    def serve() -> Any:
        port = free_port()
        cmd = [sys.executable, "-m", "engine", "serve", "--model", args.model, "--port", str(port),
               "--ctx", str(args.ctx), "--drafter", "none", "--parallel", "1"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        return start_server(cmd, port, "duet-cli serve"), port

    def ask(port: int, text: str) -> float:
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": text}],
                "tools": AGENT_TOOLS, "temperature": 0, "max_tokens": 4, "stream": True}
        return client.post(port, "/v1/chat/completions", body).ttft_s

    proc, port = serve()
    with proc:
        cold = ask(port, "Find the price of a 10 mm bolt.")
    proc, port = serve()
    with proc:
        again = ask(port, "How many M4 nuts are in stock?")
    return {"cold_s": cold, "restart_s": again}


def embeddings_run(args: argparse.Namespace, texts: list[str]) -> dict[str, float]:
    """Texts per second through /v1/embeddings: Duet, then llama-server, on the same GGUF."""

    model = resolve_model(args.embedding_model)
    threads = str(args.threads or os.cpu_count() or 1)

    def rate(port: int) -> float:
        body = {"input": texts[:EMBED_BATCH], "model": "m"}
        client.post_json(port, "/v1/embeddings", body)  # warm-up
        t0 = time.perf_counter()
        for i in range(0, len(texts), EMBED_BATCH):
            client.post_json(port, "/v1/embeddings", {"input": texts[i:i + EMBED_BATCH], "model": "m"})
        return len(texts) / (time.perf_counter() - t0)

    out: dict[str, float] = {}
    port = free_port()
    duet = [sys.executable, "-m", "engine", "serve", "--model", args.model, "--port", str(port),
            "--embedding-model", str(model), "--drafter", "none", "--threads", threads]
    with start_server(duet, port, "duet-cli serve"):
        out["duet_texts_per_s"] = rate(port)
    if args.llama_server is not None:
        port = free_port()
        peer = [str(args.llama_server), "-m", str(model), "--embeddings", "--port", str(port),
                "--host", "127.0.0.1", "-t", threads, "--no-webui", "-c", "8192", "-b", "8192",
                "-ub", "8192", "-np", str(EMBED_BATCH)]
        with start_server(peer, port, "llama-server"):
            out["llama_server_texts_per_s"] = rate(port)
    return out


def run(args: argparse.Namespace) -> int:
    parts = set(args.parts.split(","))
    results: dict[str, Any] = {"runs": []}
    for _ in range(args.repeats):
        row: dict[str, Any] = {}
        with empty_kv_store():  # each run starts from an empty store
            if "document" in parts:
                row["document"] = document_run(args)
        with empty_kv_store():
            if "agent" in parts:
                system = "You are a parts assistant. Use the tools. Reference:\n" + "\n".join(
                    p.text for p in passages()[:6])
                row["agent"] = agent_run(args, system)
        if "pdf" in parts:  # (no disk store: every question is read cold)
            row["pdf"] = pdf_run(args)
        if "embeddings" in parts:
            texts = [p.text[:600] for p in passages()[:128]]
            row["embeddings"] = embeddings_run(args, texts)
        results["runs"].append(row)
        log.info("run: %s", row)
    summary = summarize(results["runs"])
    results["summary"] = summary
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "documents.json").write_text(json.dumps(results, indent=2))
    for key, value in summary.items():
        print(f"{key:36s} {value:10.3f}")
    return 0


def summarize(runs: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}

    def med(part: str, key: str) -> float | None:
        values = [r[part][key] for r in runs if part in r and key in r[part]]
        return statistics.median(values) if values else None

    for part, keys in (("document", ("doc_tokens", "cold_s", "new_conversation_s", "restart_s")),
                       ("agent", ("cold_s", "restart_s")),
                       ("pdf", ("pdf_read_s", "plain_s", "plain_prompt_tokens", "bm25_s",
                                "bm25_retrieve_s", "bm25_prompt_tokens", "bm25_right", "embed_s",
                                "embed_retrieve_s", "embed_prompt_tokens", "embed_right")),
                       ("embeddings", ("duet_texts_per_s", "llama_server_texts_per_s"))):
        for key in keys:
            value = med(part, key)
            if value is not None:
                out[f"{part}.{key}"] = value
    if "document.restart_s" in out:
        out["document.restart_ratio"] = out["document.restart_s"] / out["document.cold_s"]
        out["document.new_conversation_ratio"] = out["document.new_conversation_s"] / out["document.cold_s"]
    if "agent.restart_s" in out:
        out["agent.restart_ratio"] = out["agent.restart_s"] / out["agent.cold_s"]
    for label in ("bm25", "embed"):
        if f"pdf.{label}_s" in out:
            out[f"pdf.{label}_ratio"] = out[f"pdf.{label}_s"] / out["pdf.plain_s"]
    if "embeddings.llama_server_texts_per_s" in out:
        out["embeddings.ratio"] = out["embeddings.duet_texts_per_s"] / out["embeddings.llama_server_texts_per_s"]
    return out
