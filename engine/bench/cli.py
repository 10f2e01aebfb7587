"""``duet-cli bench ...``: plain, speculative, session, server, rpc, parallel, structured,
tool-turn, conversation, documents, soak."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    from engine.bench import (
        conversation,
        documents,
        parallel,
        plain,
        rpc,
        server,
        session,
        speculative,
        structured,
        tool_turn,
    )
    from engine.bench.soak import command as soak

    p = sub.add_parser("bench", help="benchmarks that compare in one run")
    bench = p.add_subparsers(dest="bench", required=True)
    plain.add_parser(bench)
    speculative.add_parser(bench)
    session.add_parser(bench)
    server.add_parser(bench)
    rpc.add_parser(bench)
    parallel.add_parser(bench)
    structured.add_parser(bench)
    tool_turn.add_parser(bench)
    conversation.add_parser(bench)
    documents.add_parser(bench)
    soak.add_parser(bench)
