"""``python -m bench ...``: plain, speculative, session, server, rpc, parallel, structured,
tool-turn, conversation, documents, retrieval, exact, edge, fleet, read_ahead, transcribe, soak,
images.

The benchmarks live beside the product, not in it: run them from a checkout's root (the folder
that holds engine/ and bench/), with the venv's Python. ``pip install`` and the bundle leave them
out."""

from __future__ import annotations

import argparse

from bench import (
    conversation,
    documents,
    edge,
    exact,
    fleet,
    images,
    parallel,
    plain,
    read_ahead,
    retrieval,
    rpc,
    server,
    session,
    speculative,
    structured,
    tool_turn,
    transcribe,
)
from bench.soak import command as soak
from engine import logsetup
from engine.cli.main import run_command

BENCHMARKS = (plain, speculative, session, server, rpc, parallel, structured, tool_turn,
              conversation, documents, retrieval, exact, edge, fleet, read_ahead, transcribe, soak, images)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench",
                                     description="Benchmarks that compare in one run.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    sub = parser.add_subparsers(dest="bench", required=True)
    for module in BENCHMARKS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logsetup.configure(logsetup.level_for(args.verbose))
    return run_command("bench", args)
