"""``duet-cli export OUT.zip``: every saved conversation in one zip of Markdown and JSON with a
manifest (engine.conversation.archive), which ``duet-cli import`` reads back. One summary line,
and one line for each conversation that could not be read (exit 1 when there was any)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.conversation.archive import export_all


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "export", help="export every conversation: one zip of Markdown and JSON with a manifest")
    p.add_argument("out", type=Path, metavar="OUT.zip", help="the zip to write")
    p.add_argument("--from", dest="folder", type=Path, default=None, metavar="FOLDER",
                   help="the conversations folder to export (default: Duet's)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.set_defaults(func=run_export)
    return p


def run_export(args: argparse.Namespace) -> int:
    out: Path = args.out if args.out.suffix.lower() == ".zip" else args.out.with_suffix(".zip")
    try:
        report = export_all(out, args.folder)
    except OSError as e:
        print(f"duet-cli: export: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"path": str(report.path), "written": report.written,
                          "failed": report.failed}, ensure_ascii=False))
    else:
        n = report.written
        print(f"{n} conversation{'s' if n != 1 else ''} exported to {report.path}"
              + (f", {len(report.failed)} could not be read" if report.failed else ""))
    for line in report.failed:
        print(f"duet-cli: export: {line}", file=sys.stderr)
    return 1 if report.failed else 0
