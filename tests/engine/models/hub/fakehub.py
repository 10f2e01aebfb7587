"""A loopback stand-in for the subset of the Hugging Face Hub that ``huggingface_hub`` and Duet call.

Endpoints: ``GET /api/models`` (search, filter, sort, limit), ``GET /api/models/{repo}[/revision/{rev}]``
(siblings with LFS size and sha256, gated, cardData), ``HEAD|GET /{repo}/resolve/{rev}/{path}``
(302 to ``/cdn/...`` with ``X-Linked-Etag``, ``X-Linked-Size``, ``X-Repo-Commit``, ``ETag``; 401/403 with
``X-Error-Code: GatedRepo`` for a gated repository without the right token; 404 with
``RepoNotFound``/``EntryNotFound``) and ``HEAD|GET /cdn/{repo}/{path}`` serving the real bytes with
``Range``/``If-Range``. Faults to inject: ``cut_after`` (close the connection after N body bytes,
once per value popped), ``dead`` (while set, every request, on a new connection or a kept-alive
one, is recorded, then its connection closed without a response: a server that is gone),
``die_on_cut`` (set ``dead`` at a cut, in the handler before the connection is closed, so that no
later request is served, whatever the threads' timing), ``pause_after`` (send N bytes, set ``paused``,
then hold the connection until ``resume`` is set), ``wrong_sha`` (paths whose advertised sha256
is wrong). ``requests`` records (method, path, Range header) of every request.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GOOD_TOKEN = "hf_good_token"


@dataclass
class FakeFile:
    path: str
    source: Path
    sha256: str
    size: int = 0

    def __post_init__(self) -> None:
        self.size = self.source.stat().st_size


@dataclass
class FakeRepo:
    id: str
    files: list[FakeFile] = field(default_factory=list)
    gated: bool | str = False
    licence: str = "apache-2.0"
    downloads: int = 0
    likes: int = 0

    def file(self, path: str) -> FakeFile | None:
        return next((f for f in self.files if f.path == path), None)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.cut_after: list[int] = []
        self.die_on_cut = False
        self.dead = False  # refuse everything: see the module's docstring
        self.wrong_sha: set[str] = set()
        self.pause_after: int | None = None  # hold a GET after N body bytes until ``resume`` is set
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.requests: list[tuple[str, str, str | None]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._stopped = False
        self._connections: set = set()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, repo: FakeRepo) -> FakeRepo:
        self.repos[repo.id] = repo
        return repo

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._server.shutdown()
            self._server.server_close()
            for conn in list(self._connections):  # keep-alive connections die with the server
                try:
                    conn.shutdown(2)
                except OSError:
                    pass

    def ranges(self, path_part: str) -> list[str | None]:
        """The Range headers of the GETs whose path contains ``path_part``."""
        return [r for m, p, r in self.requests if m == "GET" and path_part in p]

    def advertised_sha(self, f: FakeFile) -> str:
        return "0" * 64 if f.path in self.wrong_sha else f.sha256


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def setup(self) -> None:
            super().setup()
            hub._connections.add(self.connection)

        def finish(self) -> None:
            hub._connections.discard(self.connection)
            try:
                super().finish()
            except OSError:
                pass

        def do_GET(self) -> None:
            self._route("GET")

        def do_HEAD(self) -> None:
            self._route("HEAD")

        def _route(self, method: str) -> None:
            url = urlsplit(self.path)
            path = unquote(url.path)
            hub.requests.append((method, path, self.headers.get("Range")))
            if hub.dead:  # recorded (the test can see it was tried), then closed without a response
                self.close_connection = True
                return
            if path == "/api/models":
                return self._search(parse_qs(url.query))
            if path.startswith("/api/models/"):
                return self._info(path[len("/api/models/"):])
            if path.startswith("/cdn/"):
                return self._cdn(method, path[len("/cdn/"):])
            parts = path.strip("/").split("/")
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve(method, "/".join(parts[:2]), "/".join(parts[4:]))
            self._send(404, b"not found", {"X-Error-Code": "EntryNotFound"})

        # -- API --------------------------------------------------------------------------
        def _search(self, q: dict[str, list[str]]) -> None:
            text = (q.get("search") or [""])[0].lower()
            filters = q.get("filter") or []
            hits = [r for r in hub.repos.values() if text in r.id.lower()
                    and ("gguf" not in filters or any(f.path.endswith(".gguf") for f in r.files))]
            hits.sort(key=lambda r: -r.downloads)
            limit = int((q.get("limit") or ["1000"])[0])
            body = [{"id": r.id, "modelId": r.id, "downloads": r.downloads, "likes": r.likes, "gated": r.gated,
                     "private": False, "tags": ["gguf", f"license:{r.licence}"],
                     "lastModified": "2026-01-01T00:00:00.000Z"} for r in hits[:limit]]
            self._json(body)

        def _info(self, rest: str) -> None:
            repo_id = rest.split("/revision/")[0]
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._send(404, b"Repository not found", {"X-Error-Code": "RepoNotFound"})
            siblings = [{"rfilename": "README.md", "size": 12, "blobId": "b" * 40}]
            siblings += [{"rfilename": f.path, "size": f.size, "blobId": "c" * 40,
                          "lfs": {"size": f.size, "sha256": hub.advertised_sha(f), "pointerSize": 134}}
                         for f in repo.files]
            self._json({"id": repo.id, "modelId": repo.id, "sha": COMMIT, "gated": repo.gated, "private": False,
                        "downloads": repo.downloads, "likes": repo.likes,
                        "tags": ["gguf", f"license:{repo.licence}"], "cardData": {"license": repo.licence},
                        "siblings": siblings})

        def _resolve(self, method: str, repo_id: str, file_path: str) -> None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._send(404, b"Repository not found", {"X-Error-Code": "RepoNotFound"})
            if repo.gated:
                auth = self.headers.get("Authorization")
                if auth is None:
                    return self._send(401, b"gated", {"X-Error-Code": "GatedRepo"})
                if auth != f"Bearer {GOOD_TOKEN}":
                    return self._send(403, b"gated", {"X-Error-Code": "GatedRepo"})
            f = repo.file(file_path)
            if f is None:
                return self._send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})
            sha = hub.advertised_sha(f)
            self._send(302, b"", {"Location": f"{hub.url}/cdn/{repo_id}/{file_path}",
                                  "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(f.size),
                                  "ETag": '"pointer-etag"', "X-Repo-Commit": COMMIT}, head=method == "HEAD")

        # -- the CDN: bytes with ranges ---------------------------------------------------
        def _cdn(self, method: str, rest: str) -> None:
            owner, name, file_path = rest.split("/", 2)
            repo = hub.repos.get(f"{owner}/{name}")
            f = repo.file(file_path) if repo else None
            if f is None:
                return self._send(404, b"no such object")
            etag = f'"{f.sha256}"'
            start, end = 0, f.size - 1
            status = 200
            rng = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            if rng and (if_range is None or if_range == etag) and rng.startswith("bytes="):
                a, _, b = rng[len("bytes="):].partition("-")
                start = int(a)
                end = min(int(b), f.size - 1) if b else f.size - 1
                if start >= f.size:
                    return self._send(416, b"", {"Content-Range": f"bytes */{f.size}"})
                status = 206
            length = end - start + 1
            self.send_response(status)
            self.send_header("Content-Length", str(length))
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
            self.end_headers()
            if method == "HEAD":
                return
            cut = hub.cut_after.pop(0) if hub.cut_after else None
            if hub.pause_after is not None:
                cut, pause = hub.pause_after, True
                hub.pause_after = None
            else:
                pause = False
            with open(f.source, "rb") as src:
                src.seek(start)
                left = length if cut is None else min(length, cut)
                while left > 0:
                    chunk = src.read(min(left, 1 << 16))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)
            if pause:
                self.wfile.flush()
                hub.paused.set()
                hub.resume.wait(30)
                self.close_connection = True
                return
            if cut is not None and cut < length:
                self.wfile.flush()
                if hub.die_on_cut:
                    hub.dead = True  # before the cut: the client's next request finds the server gone
                self.close_connection = True
                self.connection.shutdown(2)

        # -- plumbing ---------------------------------------------------------------------
        def _json(self, obj: object) -> None:
            self._send(200, json.dumps(obj).encode(), {"Content-Type": "application/json"})

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                  head: bool = False) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head and self.command != "HEAD":
                self.wfile.write(body)

    return Handler


def listing(d: Path) -> list[str]:
    """The names in folder ``d``, sorted."""
    return sorted(p.name for p in d.iterdir())
