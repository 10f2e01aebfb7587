"""``duet-cli serve``: the HTTP server (OpenAI, Anthropic and Ollama dialects) over every model
in the models folders, by name, loaded on demand (engine.runtime.pool), with ``generate``'s
flags for all of them; ``--model`` is the default one, loaded at start."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from functools import partial
from pathlib import Path

from engine.errors import DuetError
from engine.llama.model import check_gguf_file
from engine.net import is_loopback
from engine.runtime import pool
from engine.runtime.runtime import RuntimeConfig, add_runtime_arguments, config_from_args, resolve_model

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
    p.add_argument("--models-dir", action="append", default=[], metavar="DIR",
                   help="serve the GGUF models under DIR too (repeatable; the models folder always)")
    p.add_argument("--models-max", type=int, default=pool.MAX_LOADED, metavar="N",
                   help=f"models loaded at once, at most (default {pool.MAX_LOADED})")
    p.add_argument("--models-budget", type=float, default=None, metavar="GB",
                   help="memory the loaded models may take together, estimated from their headers "
                        f"(default: {pool.BUDGET_SHARE * 100:.0f}%% of the memory available, measured at "
                        "each load with what the loaded models hold)")
    p.add_argument("--ttl", type=float, default=pool.TTL_S, metavar="SECONDS",
                   help=f"unload a model idle this long (default {pool.TTL_S:.0f}; -1: never; "
                        "a request's keep_alive overrides it)")
    p.add_argument("--reasoning-budget", type=int, default=None, metavar="N",
                   help="a reasoning model thinks at most N tokens when a request sets no budget "
                        "(default: no limit; 0: thinking off)")
    p.add_argument("--embedding-model", default=None, metavar="PATH|embed",
                   help="a GGUF embedding model for /v1/embeddings and /api/embed (default: the "
                        "chat model's hidden states, mean-pooled)")
    p.add_argument("--speech-model", type=Path, default=None, metavar="FOLDER",
                   help="a faster-whisper model folder for /v1/audio/transcriptions (default: the "
                        "catalogue's whisper in the models folder, loaded at the first request)")
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
    from engine.llama.exactness import exactness
    from engine.server.app import ApiConfig, create_pool_app
    from engine.server.loading import Gate, loading_app
    from engine.server.run import host_problem, listen, offered, open_model, uvicorn_server

    if not 1 <= args.port <= 65535:
        raise DuetError(f"--port {args.port} is not a port number (1-65535)")
    if args.max_queue < 1 or args.max_body_mb < 1 or args.models_max < 1:
        raise DuetError("--max-queue, --max-body-mb and --models-max must be >= 1")
    if args.reasoning_budget is not None and args.reasoning_budget < 0:
        raise DuetError("--reasoning-budget must be >= 0")
    if args.models_budget is not None and not args.models_budget > 0:
        raise DuetError("--models-budget must be a positive number of GB")
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
    pools: list = []
    failed: list[BaseException] = []

    def load() -> None:
        try:
            offers = offered(config, [Path(d).expanduser() for d in args.models_dir], args.model)
            model_id = offers[0].name
            server_config = ApiConfig(model_id=model_id, aliases=offers[0].aliases,
                                         api_key=args.api_key or None,
                                         max_body=args.max_body_mb << 20,
                                         cors_origins=tuple(args.cors),
                                         embedding_model=embedding_model,
                                         speech_model=args.speech_model,
                                         reasoning_budget=args.reasoning_budget,
                                         exactness=exactness(
                                             config.context.exact, config.target.n_gpu_layers,
                                             (config.context.type_k, config.context.type_v),
                                             config.context.exact_gpu))
            budget = int(args.models_budget * 1e9) if args.models_budget else None
            models = pool.Pool(offers, partial(open_model, config, server_config, args.max_queue),
                               budget=budget, max_loaded=args.models_max, ttl_s=args.ttl)
            pools.append(models)
            first = models.acquire(model_id)  # the default model, loaded now
            first.value.prepare_constraints()
            first.release()
            gate.open(create_pool_app(models, server_config, config.sampling))
            print(f"duet-cli: serving {model_id} (drafter {config.speculative.drafter}, "
                  f"{config.context.n_parallel} parallel) and {len(offers) - 1} other models "
                  f"by name on http://{host}:{args.port}/v1", flush=True)
        except BaseException as e:  # the command ends with it (a DuetError: one line)
            failed.append(e)
            server.should_exit = True

    print(f"duet-cli: listening on http://{host}:{args.port} while "
          f"{config.target.path.name} loads", flush=True)
    threading.Thread(target=load, name="duet-load", daemon=True).start()
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down gracefully on SIGTERM, then raises it again: by default that ended
        # the process before the models were closed (their clients' chats kept on disk, the disk
        # store's writes flushed); now it ends here, after the block below
        signal.signal(signal.SIGTERM, _terminated)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for models in pools:
            models.close()
    if failed:
        raise failed[0]
    return 0


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)
