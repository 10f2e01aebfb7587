"""llama.cpp's RPC backend (ggml-rpc) through ctypes: workers, remote devices, connection health.

llama-cpp-python 0.3.36 no longer forwards ``rpc_servers``, so the few entry points Duet needs are
bound here from whichever of its shared libraries exports them (libggml-rpc in a build made by
scripts/bootstrap.sh).

Failure model (ggml-rpc as vendored in 0.3.36, ggml/src/ggml-rpc/ggml-rpc.cpp): the client has no
error path. A connect that fails, a handshake that fails, or a send/recv on a dead socket ends in
``GGML_ABORT`` (``abort()`` of the whole process). So:

- before loading, every worker is probed with a real handshake (HELLO) with a timeout
  (:func:`probe`): a worker that is down, busy with another client or speaks another protocol
  gives a one-line error instead of an abort or a hang;
- between passes, :class:`ConnectionWatch` looks at the client's own connections (a
  non-blocking ``MSG_PEEK``: the protocol never sends unsolicited bytes, so a readable socket
  means the worker closed it): no network traffic, microseconds. A lost worker raises
  :class:`~engine.errors.WorkerLostError` before anything touches the dead socket, and the
  model/context then leak their native handles on close (freeing them would talk to the
  dead worker, which aborts);
- a worker that dies *during* a pass cannot be recovered in-process: ggml calls its abort
  callback, and :func:`install_abort_handler`'s callback writes one line naming the worker to
  standard error, runs the rescue hooks of :mod:`engine.llama.rescue` (which save the conversation),
  and ends the process with :data:`EXIT_WORKER_LOST` instead of a SIGABRT and a native
  backtrace, or relaunches it where a relaunch is set (the app).
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import struct
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import DuetError, ModelLoadError, WorkerLostError
from engine.llama import backend, rescue

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_model_params

log = logging.getLogger(__name__)

EXIT_WORKER_LOST = 75  # EX_TEMPFAIL: the process exits with it when a worker dies mid-pass
PROTO_MAJOR = 7  # RPC_PROTO_MAJOR_VERSION of the vendored ggml-rpc
_CMD_HELLO = 14
_CAPS = 24  # RPC_CONN_CAPS_SIZE
DEV_TYPE_CPU = 0
_NO_RPC = ("this llama.cpp build has no RPC backend; rebuild it with scripts/bootstrap.sh "
           "(without DUET_NO_RPC set)")


# -- endpoints ----------------------------------------------------------------------------

def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); DuetError with a one-line reason otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DuetError(f"not a HOST:PORT endpoint: {text!r}")
    return host.strip("[]"), int(port)


def parse_endpoints(text: str) -> tuple[str, ...]:
    """``HOST:PORT[,HOST:PORT...]`` -> normalised endpoints (no duplicates)."""
    out: list[str] = []
    for item in text.split(","):
        if item.strip():
            host, port = parse_endpoint(item)
            endpoint = f"{host}:{port}"
            if endpoint in out:
                raise DuetError(f"RPC worker {endpoint} is listed twice")
            out.append(endpoint)
    if not out:
        raise DuetError("no RPC worker given")
    return tuple(out)


def probe(endpoint: str, timeout: float = 3.0) -> tuple[int, int, int]:
    """Handshake with the worker at ``endpoint`` (the protocol's HELLO) and hang up.

    Returns its protocol version; ModelLoadError naming the endpoint when it does not answer
    in ``timeout`` seconds, refuses the connection, or speaks another major version. (A ggml RPC
    worker serves one client at a time: one already serving another process accepts the
    connection but never answers.)"""
    host, port = parse_endpoint(endpoint)
    request = bytes([_CMD_HELLO]) + struct.pack("<Q", _CAPS) + bytes(_CAPS)
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(request)
            head = _recv_exact(s, 8)
            size = struct.unpack("<Q", head)[0]
            if size != 4 + _CAPS:
                raise ModelLoadError(f"RPC worker {endpoint} answered with a malformed handshake")
            major, minor, patch = _recv_exact(s, size)[:3]
    except TimeoutError:
        raise ModelLoadError(f"RPC worker {endpoint} did not answer within {timeout:g} s "
                             "(down, or busy serving another client)") from None
    except OSError as e:
        raise ModelLoadError(f"RPC worker {endpoint} is not reachable: "
                             f"{e.strerror or e}".rstrip()) from None
    if major != PROTO_MAJOR:
        raise ModelLoadError(f"RPC worker {endpoint} speaks protocol {major}.{minor}.{patch}; "
                             f"this build needs {PROTO_MAJOR}.x (update one side)")
    return major, minor, patch


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionResetError(0, "closed the connection during the handshake")
        buf += chunk
    return buf


# -- the library --------------------------------------------------------------------------

class _Lib:
    """The bound entry points (found once per process)."""

    def __init__(self) -> None:
        backend.init()  # llama.cpp's own libraries (loaded by engine.llama.backend) come first
        libdir = Path(backend._pkg.__file__).parent / "lib"
        libs = []
        for path in sorted(libdir.glob("*")):
            if path.suffix in (".so", ".dylib", ".dll") or ".so." in path.name:
                try:
                    libs.append(ctypes.CDLL(str(path)))
                except OSError:
                    continue
        rpc = next((lib for lib in libs if hasattr(lib, "ggml_backend_rpc_add_server")), None)
        if rpc is None:
            raise ModelLoadError(f"{_NO_RPC} (no library in {libdir} exports ggml_backend_rpc_*)")

        def find(name: str) -> Any:  # a ctypes function
            for lib in [rpc, *libs]:
                if hasattr(lib, name):
                    return getattr(lib, name)
            raise ModelLoadError(f"{_NO_RPC} ({name} is missing)")

        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        self.add_server = _sig(find("ggml_backend_rpc_add_server"), vp, [ctypes.c_char_p])
        self.start_server = _sig(find("ggml_backend_rpc_start_server"), None,
                                 [ctypes.c_char_p, ctypes.c_char_p, sz, sz, ctypes.POINTER(vp)])
        self.get_device_memory = _sig(find("ggml_backend_rpc_get_device_memory"), None,
                                      [ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(sz),
                                       ctypes.POINTER(sz)])
        self.reg_dev_count = _sig(find("ggml_backend_reg_dev_count"), sz, [vp])
        self.reg_dev_get = _sig(find("ggml_backend_reg_dev_get"), vp, [vp, sz])
        self.dev_by_type = _sig(find("ggml_backend_dev_by_type"), vp, [ctypes.c_int])
        self.dev_name = _sig(find("ggml_backend_dev_name"), ctypes.c_char_p, [vp])
        self.dev_memory = _sig(find("ggml_backend_dev_memory"), None,
                               [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)])
        self.set_abort_callback = _sig(find("ggml_set_abort_callback"), vp, [vp])


def _sig(fn: Any, restype: Any, argtypes: list[Any]) -> Any:
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_lib_lock = threading.Lock()
_lib: _Lib | None = None


def lib() -> _Lib:
    """The RPC entry points; ModelLoadError (one line) when this build has no RPC backend."""
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _Lib()
        return _lib


def available() -> bool:
    try:
        lib()
    except ModelLoadError:
        return False
    return True


# -- remote devices for a model -----------------------------------------------------------

@dataclass(frozen=True)
class WorkerInfo:
    endpoint: str
    devices: tuple[str, ...]
    free_bytes: int
    total_bytes: int


class RemoteDevices:
    """The devices of ``endpoints`` as llama_model_params wants them: a NULL-terminated array
    (``devices``) and, when given, a ``tensor_split`` of llama_max_devices() floats. Keep the
    object alive as long as the params are used."""

    def __init__(self, endpoints: tuple[str, ...], tensor_split: tuple[float, ...] = ()) -> None:
        rpc = lib()
        for endpoint in endpoints:
            probe(endpoint)
        devs: list[int] = []
        self.workers: list[WorkerInfo] = []
        for endpoint in endpoints:
            reg = rpc.add_server(endpoint.encode())
            if not reg:
                raise ModelLoadError(f"RPC worker {endpoint} offers no device")
            n = rpc.reg_dev_count(reg)
            mine = [rpc.reg_dev_get(reg, i) for i in range(n)]
            devs.extend(mine)
            free, total = memory(endpoint)
            names = tuple((rpc.dev_name(d) or b"?").decode() for d in mine)
            self.workers.append(WorkerInfo(endpoint, names, free, total))
        self.array = (ctypes.c_void_p * (len(devs) + 1))(*devs, None)
        self.split = None
        if tensor_split:
            limit = int(backend.lib.llama_max_devices())
            if len(tensor_split) != len(devs):
                raise ModelLoadError(f"--tensor-split has {len(tensor_split)} parts for "
                                     f"{len(devs)} remote devices")
            if len(tensor_split) > limit or any(not x >= 0 for x in tensor_split) or not any(tensor_split):
                raise ModelLoadError("--tensor-split needs non-negative parts, not all zero, "
                                     f"at most {limit}")
            self.split = (ctypes.c_float * limit)(*tensor_split)

    def apply(self, params: llama_model_params) -> None:
        params.devices = ctypes.cast(self.array, ctypes.c_void_p)  # type: ignore[assignment]  # ctypes stubs
        if self.split is not None:
            params.tensor_split = ctypes.cast(  # type: ignore[assignment]  # ctypes stubs
                self.split, ctypes.POINTER(ctypes.c_float))


def memory(endpoint: str, device: int = 0) -> tuple[int, int]:
    """(free, total) bytes the worker reports. Only call for a worker known to answer."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    lib().get_device_memory(endpoint.encode(), device, ctypes.byref(free), ctypes.byref(total))
    return free.value, total.value


# -- connection health --------------------------------------------------------------------

class ConnectionWatch:
    """Watches this process's open connections to ``endpoints`` (found once, after loading)."""

    def __init__(self, endpoints: tuple[str, ...]) -> None:
        self.endpoints = endpoints
        self.lost: str | None = None
        self._fds = _connections(endpoints)
        missing = [e for e in endpoints if e not in self._fds.values()]
        if missing:
            log.warning("no open connection found to %s; its loss cannot be detected early",
                        ", ".join(missing))
        _watches.add(self)

    @property
    def connected(self) -> tuple[str, ...]:
        """The endpoints this process holds a connection to (those holding part of the model)."""
        return tuple(e for e in self.endpoints if e in self._fds.values())

    def dead(self) -> str | None:
        """The endpoint of a connection the worker has closed, or None (all alive)."""
        if self.lost is not None:
            return self.lost
        for fd, endpoint in self._fds.items():
            if not _alive(fd, endpoint):
                self.lost = endpoint
                return endpoint
        return None

    def check(self) -> None:
        """Raise WorkerLostError if a worker went away (nothing was sent to it)."""
        endpoint = self.dead()
        if endpoint is not None:
            raise WorkerLostError(f"the RPC worker at {endpoint} went away; the reply stops "
                                  "here (restart the worker and reload the model)")

    def forget(self) -> None:
        _watches.discard(self)


_watches: set[ConnectionWatch] = set()


def _connections(endpoints: tuple[str, ...]) -> dict[int, str]:
    """{fd: endpoint} for this process's TCP sockets connected to one of ``endpoints``."""
    wanted = {}
    for endpoint in endpoints:
        host, port = parse_endpoint(endpoint)
        try:
            for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
                wanted[(info[4][0], port)] = endpoint
        except OSError:
            continue
    found: dict[int, str] = {}
    fd_dir = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    for name in os.listdir(fd_dir):
        if not name.isdigit():
            continue
        fd = int(name)
        try:
            with socket.socket(fileno=os.dup(fd)) as s:
                if s.type != socket.SOCK_STREAM:
                    continue
                peer = s.getpeername()
        except OSError:
            continue
        match = wanted.get((peer[0], peer[1])) if isinstance(peer, tuple) else None
        if match is not None:
            found[fd] = match
    return found


def _alive(fd: int, endpoint: str) -> bool:
    try:
        with socket.socket(fileno=os.dup(fd)) as s:
            host, port = s.getpeername()[:2]
            if parse_endpoint(endpoint)[1] != port:
                return False  # the descriptor was closed and reused
            try:  # MSG_DONTWAIT, not setblocking: O_NONBLOCK would be shared with ggml's fd
                data = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                return True  # nothing to read: the connection is open and idle
            return bool(data)  # b"": the worker closed it (no unsolicited bytes otherwise)
    except OSError:
        return False


# -- mid-pass loss -------------------------------------------------------------------------

_ABORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_installed: object | None = None


@_ABORT_CB
def _on_ggml_abort(message: bytes | None) -> None:
    text = (message or b"").decode("utf-8", "replace").strip()
    lost = next((w.dead() for w in list(_watches) if w.dead()), None)
    if lost is None and "RPC" not in text:
        os.write(2, (text + "\n").encode())
        return  # not ours: ggml goes on to abort() as it would have
    log.debug("ggml aborted: %s", text)
    what = (f"the RPC worker at {lost} went away during a pass" if lost else
            f"the connection to an RPC worker failed ({text.rpartition(': ')[2][:120]})")
    line = (f"duet: error: {what}; llama.cpp's RPC client cannot recover from that, so this "
            "process ends (the text streamed so far is kept)\n")
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - exiting anyway
        pass
    os.write(2, line.encode())
    rescue.run_hooks(what)  # save what only this process holds (bounded, no llama.cpp calls)
    rescue.exec_or_exit(rescue.relaunch_argv(what), EXIT_WORKER_LOST)


def install_abort_handler() -> None:
    """Route ggml's abort through :func:`_on_ggml_abort` (idempotent)."""
    global _installed
    if _installed is None:
        lib().set_abort_callback(ctypes.cast(_on_ggml_abort, ctypes.c_void_p))
        _installed = _on_ggml_abort
