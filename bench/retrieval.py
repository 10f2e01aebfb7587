"""``python -m bench retrieval``: right answers against passage tokens on real manuals (issue 58,
item 2: passages worth their tokens).

The manuals are real PDFs that Debian packages ship (bench/data/retrieval/*.json names each:
package, version, path, SHA-256 of the packed and of the unpacked file, and the questions
written from reading it, each with the page that answers it and the words a right answer holds).
They are not in the repository: each is read from where its package puts it
(``/usr/share/doc/...``), else from ``~/.cache/duet/bench/manuals/``, else fetched with
``apt-get download PACKAGE=VERSION`` into that cache; a manual found nowhere, or whose SHA-256
differs, is skipped with a line that says how to get it.

* **curve**: for every question, passage budget (``--budgets``, tokens of the prompt's
  ``<document>`` blocks, as engine.prompts.attachments counts them) and fusion mode
  (``--modes``: ``bm25`` alone; ``rrf``, BM25's candidates fused by reciprocal rank with their
  cosine order under the catalog's embedding model, the engine's scheme), whether a retrieved
  passage is on the answer's page (a hit), and the tokens the passages took. The retrieval is the
  engine's own (engine.prompts.attachments.retrieve), as the window runs it.
* **answers** (``--answers MODE@BUDGET,...``): the target model at temperature 0, nothing cached
  between questions, asked each question (or ``--answer-questions`` of each manual, evenly spaced)
  with the passages of that configuration; right when the reply holds every expected word.

Prints the tables and writes ``OUT/retrieval.json``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.chat.messages import Message
from engine.decode.sampling import SamplingParams
from engine.documents.embeddings import EmbeddingSource
from engine.documents.extract import Document, read_document
from engine.documents.passages import Passage
from engine.errors import DuetError
from engine.events import Token
from engine.llama.context_params import ContextParams
from engine.llama.model import ModelSpec
from engine.prompts.attachments import attachment, block, retrieve
from engine.prompts.request import Chat, Policy, prepare
from engine.runtime.runtime import Runtime, RuntimeConfig, resolve_model

DATA = Path(__file__).parent / "data" / "retrieval"
CACHE = Path.home() / ".cache" / "duet" / "bench" / "manuals"
BUDGETS = "250,500,1000,1500,2000"
MODES = ("bm25", "rrf")
Count = Callable[[str], int]


@dataclass(frozen=True)
class Question:
    """A question, the PDF page (1-based) that answers it, and the words a right answer holds
    (each word: its spellings, any one will do)."""

    text: str
    page: int
    words: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Manual:
    name: str
    source: dict[str, Any]
    questions: tuple[Question, ...]


def add_parser(bench_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = bench_subparsers.add_parser("retrieval", help="right answers against passage tokens")
    p.add_argument("--model", default="target", help="GGUF path or starter key (default: target)")
    p.add_argument("--embedding-model", default="embed", help="GGUF of the rrf mode's embeddings")
    p.add_argument("--manuals", default="", help="names of bench/data/retrieval/*.json (default: all)")
    p.add_argument("--budgets", default=BUDGETS, help="passage budgets in tokens, comma-separated")
    p.add_argument("--modes", default=",".join(MODES), help="bm25, rrf")
    p.add_argument("--answers", default="", help="MODE@BUDGET,... to ask the model with (none: skip)")
    p.add_argument("--answer-questions", type=int, default=0, help="N of each manual, evenly spaced (0: all)")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: one per core)")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.set_defaults(func=run)
    return p


# -- the manuals -------------------------------------------------------------------------------

def load_manuals(names: Sequence[str]) -> list[Manual]:
    """The manuals of bench/data/retrieval (those named, or all), with their questions."""
    files = sorted(DATA.glob("*.json"))
    out = []
    for f in files:
        if names and f.stem not in names:
            continue
        spec = json.loads(f.read_text())
        questions = tuple(Question(q["q"], int(q["page"]), tuple(tuple(w.split("|")) for w in q["answer"]))
                          for q in spec["questions"])
        out.append(Manual(f.stem, spec["source"], questions))
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manual_pdf(manual: Manual) -> Path | None:
    """The manual's PDF, unpacked into the cache and checked; None (and why, on stderr) if it
    is nowhere to be had."""
    src = manual.source
    pdf = CACHE / f"{manual.name}.pdf"
    if pdf.exists() and sha256(pdf) == src["pdf_sha256"]:
        return pdf
    packed = _packed(manual)
    if packed is None:
        print(f"skipped {manual.name}: {src['path']} not found and apt-get download "
              f"{src['debian_package']}={src['version']} failed; install that Debian package or put "
              f"its {Path(src['path']).name} in {CACHE}", file=sys.stderr)
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    with gzip.open(packed) as f_in, open(pdf, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    if sha256(pdf) != src["pdf_sha256"]:
        print(f"skipped {manual.name}: {pdf} is not the PDF the questions were written from "
              "(its SHA-256 differs)", file=sys.stderr)
        return None
    return pdf


def _packed(manual: Manual) -> Path | None:
    """The packed manual (.pdf.gz) with the right SHA-256: where the package puts it, in the
    cache, or fetched from the Debian archive into the cache."""
    src = manual.source
    cached = CACHE / Path(src["path"]).name
    for path in (Path(src["path"]), cached):
        if path.exists() and sha256(path) == src["gz_sha256"]:
            return path
    if _fetch_deb(src, cached) and sha256(cached) == src["gz_sha256"]:
        return cached
    return None


def _fetch_deb(src: dict[str, Any], dest: Path) -> bool:
    """``apt-get download`` the package at its version and take the manual out of it."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        return False
    with tempfile.TemporaryDirectory() as folder:
        try:
            subprocess.run(["apt-get", "download", f"{src['debian_package']}={src['version']}"],
                           cwd=folder, check=True, capture_output=True, timeout=300)
            deb = next(Path(folder).glob("*.deb"))
            subprocess.run(["dpkg-deb", "-x", str(deb), str(Path(folder) / "x")], check=True,
                           capture_output=True, timeout=300)
        except (subprocess.SubprocessError, OSError, StopIteration):
            return False
        found = Path(folder) / "x" / src["path"].lstrip("/")
        if not found.exists():
            return False
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found, dest)
    return True


# -- scoring -------------------------------------------------------------------------------------

def is_right(reply: str, words: tuple[tuple[str, ...], ...]) -> bool:
    """Whether ``reply`` holds every expected word (any spelling), as a whole word: "4" is not
    found in "48", "VALGRIND_OPTS" is found in "$VALGRIND_OPTS"."""
    return all(any(_holds(reply, s) for s in spellings) for spellings in words)


def _holds(reply: str, word: str) -> bool:
    left = r"(?<![\w])" if word[:1].isalnum() else ""
    right = r"(?![\w])" if word[-1:].isalnum() else ""
    return re.search(left + re.escape(word) + right, reply, re.IGNORECASE) is not None


def passages_tokens(passages: Sequence[Passage], count: Count) -> int:
    """The tokens the passages take in the prompt (their ``<document>`` blocks)."""
    return sum(count(block(p.doc_name, p.text, p.page)) for p in passages)


def find(doc: Document, question: Question, mode: str, budget: int, count: Count,
         embed: Any) -> list[Passage]:
    """The passages the engine puts into the prompt for ``question`` in ``mode`` and ``budget``."""
    return retrieve([attachment(doc)], question.text, budget, count,
                    embed if mode == "rrf" else None)


# -- the curve -----------------------------------------------------------------------------------

def curve(manual: Manual, doc: Document, budgets: Sequence[int], modes: Sequence[str],
          count: Count, embed: Any) -> list[dict[str, Any]]:
    """One row per (mode, budget): hits out of the questions, mean passage tokens, and which
    questions missed."""
    rows = []
    for mode in modes:
        for budget in budgets:
            t0 = time.perf_counter()
            hits, tokens, missed = 0, [], []
            for i, q in enumerate(manual.questions):
                found = find(doc, q, mode, budget, count, embed)
                tokens.append(passages_tokens(found, count))
                if any(p.page == q.page for p in found):
                    hits += 1
                else:
                    missed.append(i)
            rows.append({"manual": manual.name, "mode": mode, "budget": budget, "hits": hits,
                         "questions": len(manual.questions), "mean_tokens": sum(tokens) / len(tokens),
                         "missed": missed, "seconds": time.perf_counter() - t0})
            print(_curve_line(rows[-1]), flush=True)
    return rows


def _curve_line(r: dict[str, Any]) -> str:
    return (f"{r['manual']:<10} {r['mode']:<5} {r['budget']:>5} tokens: {r['hits']:>2}/{r['questions']} "
            f"hits, {r['mean_tokens']:.0f} tokens used, missed {r['missed']}")


# -- the answers ---------------------------------------------------------------------------------

def answers(rt: Runtime, manual: Manual, doc: Document, configs: Sequence[tuple[str, int]],
            limit: int, embed: Any) -> list[dict[str, Any]]:
    """One row per configuration: right answers of the target at temperature 0."""
    params = SamplingParams(temperature=0, max_tokens=48)
    count = _counter(rt)
    questions = spread(manual.questions, limit)
    rows = []
    for mode, budget in configs:
        right, replies = 0, []
        for q in questions:
            found = find(doc, q, mode, budget, count, embed)
            reply = ask(rt, "".join(block(p.doc_name, p.text, p.page) for p in found) + q.text, params)
            right += is_right(reply, q.words)
            replies.append(reply)
        rows.append({"manual": manual.name, "mode": mode, "budget": budget, "right": right,
                     "questions": len(questions), "replies": replies})
        print(f"{manual.name:<10} {mode:<5} {budget:>5} tokens: {right}/{len(questions)} right",
              flush=True)
    return rows


def spread(questions: Sequence[Question], n: int) -> list[Question]:
    """``n`` of ``questions`` evenly spaced (all if ``n`` is 0 or more than there are): a subset
    that still covers the manual from its first pages to its last."""
    if n <= 0 or n >= len(questions):
        return list(questions)
    return [questions[i * len(questions) // n] for i in range(n)]


def ask(rt: Runtime, text: str, params: SamplingParams) -> str:
    """The target's reply to ``text`` in a new conversation."""
    rt.ctx.clear()
    turn = prepare(rt.target, Chat((Message("user", text),), params), Policy(rt.ctx.n_ctx))
    return "".join(ev.text for ev in rt.generator.complete(turn.prompt, params)
                   if isinstance(ev, Token))


def _counter(rt: Runtime) -> Count:
    return lambda text: len(rt.target.tokenize_text(text))


def parse_configs(text: str) -> list[tuple[str, int]]:
    """"bm25@1000,rrf@1024" as [("bm25", 1000), ("rrf", 1024)]."""
    out = []
    for item in filter(None, text.split(",")):
        mode, _, budget = item.partition("@")
        if mode not in MODES or not budget.isdigit():
            raise ValueError(f"--answers: {item!r} is not MODE@BUDGET with MODE one of {MODES}")
        out.append((mode, int(budget)))
    return out


# -- the run -------------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    manuals = load_manuals([n for n in args.manuals.split(",") if n])
    budgets = [int(b) for b in args.budgets.split(",") if b]
    modes = [m for m in args.modes.split(",") if m]
    configs = parse_configs(args.answers)
    # no state kept between questions: every prompt is read cold
    config = RuntimeConfig(target=ModelSpec(resolve_model(args.model)),
                           context=ContextParams(n_ctx=args.ctx, n_threads=args.threads),
                           state_cache_bytes=0, kv_store_bytes=0)
    result: dict[str, Any] = {"curve": [], "answers": [], "manuals": {}}
    with Runtime(config) as rt:
        source = _embeddings(rt, args.embedding_model, modes, configs)
        embed = source.embed if source else None
        for manual in manuals:
            pdf = manual_pdf(manual)
            if pdf is None:
                continue
            doc = read_document(pdf)
            result["manuals"][manual.name] = {"pages": len(doc.pages), "questions": len(manual.questions),
                                              **manual.source}
            result["curve"] += curve(manual, doc, budgets, modes, _counter(rt), embed)
            if configs:
                result["answers"] += answers(rt, manual, doc, configs, args.answer_questions, embed)
        if source is not None:
            source.close()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "retrieval.json").write_text(json.dumps(result, indent=2))
    print(table(result))
    return 0


def _embeddings(rt: Runtime, path: str, modes: Sequence[str],
                configs: Sequence[tuple[str, int]]) -> EmbeddingSource | None:
    """The catalog's embedding model when a mode needs it (its absence is an error then)."""
    if "rrf" not in modes and all(m != "rrf" for m, _ in configs):
        return None
    try:
        source = EmbeddingSource(rt.target, resolve_model(path))
        source.embed(["loaded before the questions"])
    except DuetError as e:
        raise SystemExit(f"the rrf mode needs the embedding model {path}: {e}") from e
    return source


def table(result: dict[str, Any]) -> str:
    """The curve (hits of every manual together, per mode and budget) and the answers."""
    lines = ["| mode | budget | " + " | ".join(result["manuals"]) + " | all | tokens used |",
             "|---|---|" + "---|" * (len(result["manuals"]) + 2)]
    keys = dict.fromkeys((r["mode"], r["budget"]) for r in result["curve"])
    for mode, budget in keys:
        rows = [r for r in result["curve"] if (r["mode"], r["budget"]) == (mode, budget)]
        hits, n = sum(r["hits"] for r in rows), sum(r["questions"] for r in rows)
        tokens = sum(r["mean_tokens"] * r["questions"] for r in rows) / max(n, 1)
        cells = " | ".join(f"{r['hits']}/{r['questions']}" for r in rows)
        lines.append(f"| {mode} | {budget} | {cells} | {hits}/{n} ({hits / max(n, 1):.0%}) | {tokens:.0f} |")
    for r in result["answers"]:
        lines.append(f"answers {r['manual']} {r['mode']}@{r['budget']}: {r['right']}/{r['questions']}")
    return "\n".join(lines)
