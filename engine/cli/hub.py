"""``duet-cli models search|files|download|pair``: Hugging Face from the command line.

``engine/cli/models.py`` registers these next to ``fetch`` and ``list``. Each takes ``--json``
(one JSON document on stdout); otherwise a table. Progress goes to stderr; errors are one line.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from engine import params, paths
from engine.llama.placement_params import PlacementParams
from engine.models.hub import fit
from engine.models.hub.download import DownloadProgress, download_entry
from engine.models.hub.errors import DownloadCancelled, HubError
from engine.models.hub.pairing import ModelRef, pair_drafts
from engine.models.hub.remote_header import remote_header
from engine.models.hub.search import repo_files, search

PROG = "duet-cli"


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("search", help="search Hugging Face for GGUF models, most downloaded first")
    s.add_argument("query")
    s.add_argument("--limit", type=int, default=20)
    s.set_defaults(func=run_search)
    f = sub.add_parser("files", help="a repository's GGUF files by quantization, with a fit estimate")
    f.add_argument("repo")
    f.add_argument("--fit", metavar="FILE", help="read FILE's header and estimate whether it fits here")
    f.add_argument("--ctx", type=int, default=4096, help="context size for the fit estimate (default 4096)")
    params.add_arguments(f, PlacementParams)
    f.set_defaults(func=run_files)
    d = sub.add_parser("download", help="download a GGUF (all parts of a split one) into the models folder")
    d.add_argument("repo")
    d.add_argument("file")
    d.set_defaults(func=run_download)
    p = sub.add_parser("pair", help="drafts that can pair with a target, judged from their headers")
    p.add_argument("target", help="owner/name[/file.gguf] on the Hub, or a local GGUF path")
    p.add_argument("--candidate", action="append", default=[], metavar="REF",
                   help="another draft to judge (owner/name[/file.gguf] or a path); repeatable")
    p.add_argument("--no-local", action="store_true", help="leave out the GGUF files in the models folder")
    p.set_defaults(func=run_pair)
    for parser in (s, f, d, p):
        parser.add_argument("--json", action="store_true", help="print one JSON document")


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 1


def _dump(obj: Any) -> None:
    print(json.dumps(obj, indent=1))


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e6:.1f}"


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def run_search(args: argparse.Namespace) -> int:
    try:
        hits = search(args.query, args.limit)
    except HubError as e:
        return _error(str(e))
    if args.json:
        _dump([h.to_json() for h in hits])
    elif not hits:
        print(f"no GGUF repositories match {args.query!r}")
    else:
        print(_table([("REPOSITORY", "DOWNLOADS", "LIKES", "GATED")] +
                     [(h.repo, str(h.downloads), str(h.likes), str(h.gated or "")) for h in hits]))
    return 0


def run_files(args: argparse.Namespace) -> int:
    gpu_layers = params.from_args(PlacementParams, args).gpu_layers  # a bad count: one line
    try:
        files = repo_files(args.repo)
        estimate = None
        if args.fit:
            entry = files.entry(args.fit)
            header = remote_header(args.repo, entry.first.path)
            estimate = fit.estimate(header, fit.FitRequest(args.ctx, gpu_layers), _machine(gpu_layers),
                                    file_size=entry.size)
    except HubError as e:
        return _error(str(e))
    if args.json:
        _dump({**files.to_json(), "fit": estimate.to_json() if estimate else None})
        return 0
    print(f"{files.repo}  licence: {files.licence}  gated: {files.gated or 'no'}")
    rows = [("QUANT", "SIZE MB", "PARTS", "FILE")]
    rows += [(e.quant, _mb(e.size), str(len(e.files)), e.name) for e in files.entries]
    print(_table(rows) if files.entries else "no GGUF files")
    if estimate:
        print(estimate.reason)
    return 0


def _machine(gpu_layers: int) -> fit.Machine:
    """This machine, with its GPU memory as the devices report it when layers go there."""
    if not gpu_layers:
        return fit.machine()
    from engine.llama.devices import gpu_memory  # lazy: loads llama.cpp's backends

    return fit.machine(gpu_memory())


class _Printer:
    def __init__(self) -> None:
        self._decile = -1

    def __call__(self, p: DownloadProgress) -> None:
        if p.stage != "download":
            print(f"{p.file}: {'verifying SHA-256' if p.stage == 'verify' else 'done'}", file=sys.stderr)
            return
        decile = p.done_bytes * 10 // max(p.total_bytes, 1)
        if decile == self._decile:
            return
        self._decile = decile
        eta = f", {p.eta_s:.0f} s left" if p.eta_s is not None else ""
        print(f"{p.file}: {decile * 10}% ({p.done_bytes / 1e6:.0f}/{p.total_bytes / 1e6:.0f} MB, "
              f"{p.bytes_per_s / 1e6:.1f} MB/s{eta})", file=sys.stderr, flush=True)


def run_download(args: argparse.Namespace) -> int:
    cancel = threading.Event()
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        entry = repo_files(args.repo).entry(args.file)
        path = download_entry(args.repo, entry, paths.models_dir(), progress=_Printer(), cancel=cancel)
    except DownloadCancelled as e:
        _error(str(e))
        return 130
    except HubError as e:
        return _error(str(e))
    finally:
        signal.signal(signal.SIGINT, previous)
    if args.json:
        _dump({"path": str(path), "files": [f.path for f in entry.files], "size": entry.size})
    else:
        print(path)
    return 0


def run_pair(args: argparse.Namespace) -> int:
    try:
        target, verdicts = pair_drafts(ModelRef.parse(args.target),
                                       [ModelRef.parse(c) for c in args.candidate],
                                       local_dir=None if args.no_local else paths.models_dir())
    except HubError as e:
        return _error(str(e))
    if args.json:
        _dump({"target": target.ref.label, "facts": target.facts.to_json(),
               "drafts": [v.to_json() for v in verdicts]})
        return 0
    print(f"target: {target.ref.label} ({target.facts.architecture}, vocab {target.facts.n_vocab})")
    if not verdicts:
        print("no candidate drafts (name some with --candidate)")
        return 0
    checked = {True: "checked", False: "unchecked", None: ""}
    print(_table([("OK", "SIZE MB", "CATALOG", "DRAFT", "REASON")] +
                 [("yes" if v.ok else "no", _mb(v.size), checked[v.checked], v.candidate.label, v.reason)
                  for v in verdicts]))
    return 0
