"""``duet-cli import FILE...``: conversations from ChatGPT, Claude, Open WebUI, LM Studio, the
llama.cpp web UI or Duet's own exports into the conversations folder
(engine.conversation.importers), with a progress line on standard error while it runs, one
summary line at the end and one line for each record that could not be imported (exit 1 when
there was any)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from engine.conversation.importers.run import Progress, import_files

PROGRESS_S = 0.2  # the progress line is redrawn at most this often on a terminal
PROGRESS_PIPE_S = 5.0  # and written this often to a file or pipe


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "import", help="import conversations from ChatGPT, Claude, Open WebUI, LM Studio, "
                       "llama.cpp's web UI or a Duet export")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE",
                   help="an export: conversations.json or its zip, a chat's JSON, a Duet "
                        "export (.json or .md)")
    p.add_argument("--into", type=Path, default=None, metavar="FOLDER",
                   help="the folder to write to (default: Duet's conversations folder)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.set_defaults(func=run_import)
    return p


def progress_line(p: Progress) -> str:
    share = f"{100 * p.done_bytes / p.total_bytes:.0f}%" if p.total_bytes else "?"
    return (f"importing {p.file.name}: {share} read, {p.added} added, {p.updated} updated, "
            f"{p.skipped} already there, {p.failed} failed")


def run_import(args: argparse.Namespace) -> int:
    """A progress line on standard error: redrawn in place on a terminal, else one line every
    PROGRESS_PIPE_S (a log keeps a long import's progress without a line per conversation)."""
    live = sys.stderr.isatty()
    every = PROGRESS_S if live else PROGRESS_PIPE_S
    last = [time.monotonic()]
    drawn = [False]

    def progress(p: Progress) -> None:
        now = time.monotonic()
        if now - last[0] < every:
            return
        last[0] = now
        sys.stderr.write(f"\r\033[K{progress_line(p)}" if live else progress_line(p) + "\n")
        sys.stderr.flush()
        drawn[0] = True

    report = import_files(args.files, args.into, progress=progress)
    if live and drawn[0]:
        sys.stderr.write("\r\033[K")
    if args.json:
        print(json.dumps({"added": [str(p) for p in report.added],
                          "updated": [str(p) for p in report.updated],
                          "skipped": report.skipped, "failed": report.failed,
                          "n_failed": report.n_failed}, ensure_ascii=False))
    else:
        n = len(report.added)
        updated = f", {len(report.updated)} updated" if report.updated else ""
        print(f"{n} conversation{'s' if n != 1 else ''} imported{updated}, {report.skipped} "
              f"already there, {report.n_failed} failed")
    for line in report.failed:
        print(f"duet-cli: import: {line}", file=sys.stderr)
    if report.n_failed > len(report.failed):
        print(f"duet-cli: import: and {report.n_failed - len(report.failed):,} more records "
              "that could not be imported", file=sys.stderr)
    return 1 if report.n_failed else 0
