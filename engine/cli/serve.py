"""``duet-cli serve``: the OpenAI-compatible server on one model (with the generate flags)."""

from __future__ import annotations

import argparse
import logging
import os
import threading

from engine.errors import DuetError
from engine.llama.model import check_gguf_file
from engine.net import is_loopback
from engine.runtime.runtime import Runtime, RuntimeConfig, add_runtime_arguments, config_from_args, resolve_model

log = logging.getLogger(__name__)

SERVE_PARALLEL = 4


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("serve", help="serve the model over an OpenAI-compatible HTTP API")
    add_runtime_arguments(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; another one needs --api-key)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (1-65535, default 8080)")
    p.add_argument("--api-key", default=os.environ.get("DUET_API_KEY"),
                   help="require Authorization: Bearer KEY (default: $DUET_API_KEY)")
    p.add_argument("--insecure-no-key", action="store_true",
                   help="allow a non-loopback --host without an API key")
    p.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                   help="allow browser requests from ORIGIN (repeatable; default: none)")
    p.add_argument("--max-queue", type=int, default=8,
                   help="requests that may wait for the engine (beyond the one it runs) before 429")
    p.add_argument("--max-body-mb", type=int, default=8, help="largest request body, in MiB")
    p.add_argument("--embedding-model", default=None, metavar="PATH|embed",
                   help="a GGUF embedding model for /v1/embeddings and /api/embed (default: the "
                        "chat model's hidden states, mean-pooled)")
    # Speculation on every request: auto (n-gram alone when no --draft) unless told otherwise;
    # four clients decoded together, as llama-server's and LM Studio's defaults (they share the
    # context's cells, so memory stays that of one: docs/benchmarks/parallel.md).
    p.set_defaults(func=run, drafter="auto", n_parallel=SERVE_PARALLEL)
    for action in p._actions:
        if action.dest == "drafter":
            action.help = "speculative drafter (default: auto; the n-gram drafter alone without --draft)"
    return p


def serve_config(args: argparse.Namespace) -> RuntimeConfig:
    """The runtime ``serve`` runs: ``generate``'s flags (the cache sizes among them)."""
    return config_from_args(args)


def run(args: argparse.Namespace) -> int:
    """Listen at once (every route answers 503 while the model loads, engine.server.loading),
    load, then serve; a load that fails ends the command with its one line."""
    # lazy: the HTTP server (starlette, uvicorn, pydantic, the routes: ~0.2 s) only for `serve`,
    # not at every duet-cli start (the parser imports this module) nor in the window (app.control.settings
    # imports SERVE_PARALLEL)
    from engine.server.app import ApiConfig
    from engine.server.loading import Gate, loading_app
    from engine.server.run import build, host_problem, listen, model_names, uvicorn_server

    if not 1 <= args.port <= 65535:
        raise DuetError(f"--port {args.port} is not a port number (1-65535)")
    if args.max_queue < 1 or args.max_body_mb < 1:
        raise DuetError("--max-queue and --max-body-mb must be >= 1")
    problem = host_problem(args.host, args.api_key)
    if problem and not args.insecure_no_key:
        raise DuetError(f"{problem} (--api-key KEY, or --insecure-no-key if you mean it)")
    if not is_loopback(args.host):
        log.warning("listening on %s: anyone who can reach it %s", args.host,
                    "and has the API key can use the model" if args.api_key else
                    "can use the model (no API key)")
    config = serve_config(args)
    embedding_model = resolve_model(args.embedding_model) if args.embedding_model else None
    if embedding_model is not None:
        check_gguf_file(embedding_model)
    try:
        sock = listen(args.host, args.port)
    except OSError as e:
        raise DuetError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    host = f"[{args.host}]" if ":" in args.host else args.host
    gate = Gate(loading_app(config.target.path.name))
    server = uvicorn_server(gate)
    engines: list = []
    failed: list[BaseException] = []

    def load() -> None:
        try:
            runtime = Runtime(config)
            model_id, aliases = model_names(runtime, args.model)
            server_config = ApiConfig(model_id=model_id, aliases=aliases,
                                         api_key=args.api_key or None,
                                         max_body=args.max_body_mb << 20,
                                         cors_origins=tuple(args.cors),
                                         embedding_model=embedding_model)
            engine, app = build(runtime, server_config, max_queue=args.max_queue)
            engines.append(engine)
            gate.open(app)
            print(f"duet-cli: serving {model_id} (drafter {config.speculative.drafter}, "
                  f"{config.context.n_parallel} parallel) on http://{host}:{args.port}/v1",
                  flush=True)
        except BaseException as e:  # the command ends with it (a DuetError: one line)
            failed.append(e)
            server.should_exit = True

    print(f"duet-cli: listening on http://{host}:{args.port} while "
          f"{config.target.path.name} loads", flush=True)
    threading.Thread(target=load, name="duet-load", daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for engine in engines:
            engine.close()
    if failed:
        raise failed[0]
    return 0
