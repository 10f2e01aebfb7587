"""``duet-cli worker``: serve this machine's CPU backend to other Duet processes (ggml RPC).

The server is llama.cpp's own (``ggml_backend_rpc_start_server``); it blocks in a daemon thread
while the main thread waits for Ctrl+C or SIGTERM, so either ends the worker promptly.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from engine.errors import DuetError
from engine.llama import rpc
from engine.net import is_loopback

log = logging.getLogger(__name__)

UNAUTHENTICATED = (
    "the ggml RPC protocol has no authentication and has had remote-code-execution bugs "
    "(CVE-2026-34159): anyone who can reach the port can run code on this machine. Keep workers "
    "on 127.0.0.1 and reach them through an SSH tunnel (ssh -L PORT:127.0.0.1:PORT host) or a "
    "VPN, or pass --i-understand-this-is-unauthenticated")
READY = "duet worker: listening on"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="serve this machine's CPU to other Duet processes (RPC)")
    p.add_argument("--listen", default="127.0.0.1:50052", metavar="HOST:PORT",
                   help="address to listen on (default: 127.0.0.1:50052)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: one per core)")
    p.add_argument("--mem", type=float, default=None, metavar="GiB",
                   help="memory to offer (clients split the model by it; default: what is free)")
    p.add_argument("--cache", type=Path, default=None, metavar="DIR",
                   help="keep received weights in DIR so a reload skips sending them")
    p.add_argument("--i-understand-this-is-unauthenticated", dest="unauthenticated",
                   action="store_true", help="allow a non-loopback --listen address")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    host, port = rpc.parse_endpoint(args.listen)
    if not is_loopback(host) and not args.unauthenticated:
        raise DuetError(f"refusing to listen on {host}:{port}: {UNAUTHENTICATED}")
    if args.mem is not None and not args.mem > 0:
        raise DuetError("--mem must be a positive number of GiB")
    _check_free(host, port)
    threads = args.threads if args.threads > 0 else (os.cpu_count() or 1)
    endpoint = f"{host}:{port}"
    mem = int(args.mem * 2**30) if args.mem is not None else None
    rpc.lib()  # a one-line error now if this build has no RPC
    failed: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        try:
            serve_backend(endpoint, threads, mem, args.cache)
        except DuetError as e:
            failed.append(str(e))
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=serve, name="rpc-server", daemon=True).start()
    if _wait_listening(host, port, stop):
        print(f"{READY} {endpoint} ({threads} threads)", flush=True)
    stop.wait()
    if failed:
        raise DuetError(failed[0])
    print("duet worker: stopped", file=sys.stderr)
    return 0


def _check_free(host: str, port: int) -> None:
    """A one-line error now if the port is taken (ggml would only print to stderr)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise DuetError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _wait_listening(host: str, port: int, stop: threading.Event) -> bool:
    """Wait until the server accepts connections (it prints nothing when it starts to);
    False when it stopped first."""
    while not stop.is_set():
        try:
            socket.create_connection((host, port), timeout=5.0).close()
            return True
        except OSError as e:
            log.debug("not listening yet: %s", e)
            stop.wait(0.05)
    return False


# -- llama.cpp's RPC server, through ctypes ---------------------------------------------

_MEM_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                           ctypes.POINTER(ctypes.c_size_t))
_GET_MEMORY_SLOT = 2  # ggml_backend_device_i: get_name, get_description, get_memory, ...


def serve_backend(endpoint: str, n_threads: int, mem_bytes: int | None = None,
                  cache_dir: Path | None = None) -> None:
    """Serve this machine's CPU backend at ``endpoint`` until the process ends (blocks).

    ``mem_bytes`` caps the memory the worker advertises (clients split the model in proportion
    to it). ggml-rpc asks the CPU device itself, so the cap replaces the get_memory entry of the
    CPU device's interface in this process (a worker-only patch of a writable static struct)."""
    ggml = rpc.lib()
    cpu = ggml.dev_by_type(rpc.DEV_TYPE_CPU)
    if not cpu:
        raise DuetError("llama.cpp found no CPU device to serve")
    if mem_bytes is not None:
        _cap_memory(cpu, mem_bytes)
    devices = (ctypes.c_void_p * 1)(cpu)
    cache = os.fsencode(cache_dir) if cache_dir is not None else None
    ggml.start_server(endpoint.encode(), cache, max(1, n_threads), 1, devices)
    raise DuetError(f"the RPC worker could not listen on {endpoint} (address in use?)")


def _cap_memory(device: int, cap: int) -> None:
    ggml = rpc.lib()
    real = ctypes.cast(device, ctypes.POINTER(ctypes.c_void_p))[_GET_MEMORY_SLOT]
    original = _MEM_CB(real)

    def get_memory(dev: int | None, free: Any, total: Any) -> None:
        original(dev, free, total)
        free[0] = min(free[0], cap)
        total[0] = cap

    callback = _MEM_CB(get_memory)
    ctypes.cast(device, ctypes.POINTER(ctypes.c_void_p))[_GET_MEMORY_SLOT] = ctypes.cast(
        callback, ctypes.c_void_p)
    _keep.append(callback)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    ggml.dev_memory(device, ctypes.byref(free), ctypes.byref(total))
    log.info("advertising %.1f GiB (of which %.1f free)", total.value / 2**30, free.value / 2**30)


_keep: list[object] = []
