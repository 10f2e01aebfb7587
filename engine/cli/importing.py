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

PROGRESS_S = 0.2  # the progress line is redrawn at most this often


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


def run_import(args: argparse.Namespace) -> int:
    shown = [0.0]
    live = sys.stderr.isatty()

    def progress(p: Progress) -> None:
        now = time.monotonic()
        if not live or now - shown[0] < PROGRESS_S:
            return
        shown[0] = now
        share = f"{100 * p.done_bytes / p.total_bytes:3.0f}%" if p.total_bytes else "   "
        sys.stderr.write(f"\rimporting {p.file.name}: {share}  {p.added} added, "
                         f"{p.skipped} already there, {p.failed} failed")
        sys.stderr.flush()

    report = import_files(args.files, args.into, progress=progress)
    if live and shown[0]:
        sys.stderr.write("\r\033[K")
    if args.json:
        print(json.dumps({"added": [str(p) for p in report.added], "skipped": report.skipped,
                          "failed": report.failed}))
    else:
        print(f"{len(report.added)} conversation{'s' if len(report.added) != 1 else ''} "
              f"imported, {report.skipped} already there, {len(report.failed)} failed")
    for line in report.failed:
        print(f"duet-cli: import: {line}", file=sys.stderr)
    return 1 if report.failed else 0
