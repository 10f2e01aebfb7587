"""``duet-cli serve``: the OpenAI-compatible server on one model (with the generate flags)."""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING

from engine.errors import DuetError

if TYPE_CHECKING:
    from engine.runtime import RuntimeConfig

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from engine.runtime import add_runtime_arguments
    from engine.state_cache import DEFAULT_CACHE_BYTES

    p = sub.add_parser("serve", help="serve the model over an OpenAI-compatible HTTP API")
    add_runtime_arguments(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; another one needs --api-key)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--api-key", default=os.environ.get("DUET_API_KEY"),
                   help="require Authorization: Bearer KEY (default: $DUET_API_KEY)")
    p.add_argument("--insecure-no-key", action="store_true",
                   help="allow a non-loopback --host without an API key")
    p.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                   help="allow browser requests from ORIGIN (repeatable; default: none)")
    p.add_argument("--max-queue", type=int, default=8,
                   help="requests that may wait for the engine (beyond the one it runs) before 429")
    p.add_argument("--cache-mb", type=int, default=DEFAULT_CACHE_BYTES >> 20,
                   help="memory for saved conversation states, in MiB (0: only the live one)")
    p.add_argument("--max-body-mb", type=int, default=8, help="largest request body, in MiB")
    # Speculation on every request: auto (n-gram alone when no --draft) unless told otherwise.
    p.set_defaults(func=run, drafter="auto")
    for action in p._actions:
        if action.dest == "drafter":
            action.help = "speculative drafter (default: auto; the n-gram drafter alone without --draft)"
    return p


def serve_config(args: argparse.Namespace) -> RuntimeConfig:
    """The runtime ``serve`` runs: ``generate``'s flags, and ``--cache-mb`` as the state cache's
    budget."""
    from dataclasses import replace

    from engine.runtime import runtime_config

    return replace(runtime_config(args), state_cache_bytes=args.cache_mb << 20)


def run(args: argparse.Namespace) -> int:
    from engine.runtime import Runtime
    from engine.server.app import ServerConfig
    from engine.net import is_loopback
    from engine.server.run import build, host_problem, model_names, serve_forever

    if not 0 <= args.port <= 65535:
        raise DuetError(f"--port {args.port} is not a port number")
    if args.max_queue < 1 or args.cache_mb < 0 or args.max_body_mb < 1:
        raise DuetError("--max-queue and --max-body-mb must be >= 1, --cache-mb >= 0")
    problem = host_problem(args.host, args.api_key)
    if problem and not args.insecure_no_key:
        raise DuetError(f"{problem} (--api-key KEY, or --insecure-no-key if you mean it)")
    if not is_loopback(args.host):
        log.warning("listening on %s: anyone who can reach it %s", args.host,
                    "and has the API key can use the model" if args.api_key else
                    "can use the model (no API key)")
    config = serve_config(args)
    runtime = Runtime(config)
    model_id, aliases = model_names(runtime, args.model)
    server_config = ServerConfig(model_id=model_id, aliases=aliases, api_key=args.api_key or None,
                                 max_body=args.max_body_mb << 20, cors_origins=tuple(args.cors))
    engine, app = build(runtime, server_config, max_queue=args.max_queue)
    try:
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"duet-cli: serving {model_id} (drafter {config.speculative.drafter}) on "
              f"http://{host}:{args.port}/v1", flush=True)
        try:
            serve_forever(app, args.host, args.port)
        except OSError as e:
            raise DuetError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    finally:
        engine.close()
    return 0
