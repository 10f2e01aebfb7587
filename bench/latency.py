"""A TCP forwarder that delays every byte by a fixed one-way latency (both directions).

The benchmark's fallback where ``tc netem`` is not available (no sch_netem module, no root):
bytes are timestamped when they arrive and sent on ``delay_s`` later, in order, so a request
pipeline is delayed like a link rather than serialised. Loopback only; benchmark use only.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time

log = logging.getLogger(__name__)


class DelayProxy:
    """Listens on 127.0.0.1:<port>; each connection is forwarded to ``target`` with delay."""

    def __init__(self, target: tuple[str, int], delay_s: float) -> None:
        self.target, self.delay_s = target, delay_s
        self._server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._sockets: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True, name="delay-proxy").start()

    def close(self) -> None:
        for s in self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
                upstream = socket.create_connection(self.target)
            except OSError:
                return
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, upstream]
            self._pipe(client, upstream)
            self._pipe(upstream, client)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def read() -> None:
            while True:
                try:
                    data = src.recv(1 << 16)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + self.delay_s, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = chunks.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()
